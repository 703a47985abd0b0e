"""Clip source rules: exactly one source, allowed roots for paths, public addresses for URLs."""

import socket

import pytest

from serve_app.config import SourcesConfig
from serve_app.errors import ForbiddenSourceError, InvalidRequestError, NotFoundError, UnprocessableClipError
from serve_app.sources import ClipSource, address_kind, check_url, resolve_local_path


def resolver(mapping):
    """A getaddrinfo stand-in: host -> list of addresses."""

    def resolve(host, port, family=0, type=0, *args):
        if host not in mapping:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        family = lambda a: socket.AF_INET6 if ":" in a else socket.AF_INET  # noqa: E731
        return [(family(a), socket.SOCK_STREAM, 6, "", (a, port)) for a in mapping[host]]

    return resolve


def test_a_clip_source_holds_exactly_one_kind():
    assert ClipSource(url="http://x/y.mp4").param == "video_url"
    assert ClipSource(path="a.mp4").param == "video_path"
    assert ClipSource(data=b"x").param == "video"
    with pytest.raises(ValueError):
        ClipSource(data=b"x", url="http://x")
    with pytest.raises(ValueError):
        ClipSource()


def test_paths_resolve_dotdot_and_symlinks_before_the_root_check(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.mp4").write_bytes(b"x")
    (root / "ok.mp4").write_bytes(b"x")
    (root / "link.mp4").symlink_to(outside / "secret.mp4")
    assert resolve_local_path("ok.mp4", [str(root)], 10) == (root / "ok.mp4").resolve()
    for bad in ("link.mp4", "../outside/secret.mp4", str(outside / "secret.mp4")):
        with pytest.raises(ForbiddenSourceError, match="outside the allowed roots"):
            resolve_local_path(bad, [str(root)], 10)
    # A missing file says relative paths resolve against the first root, without showing the
    # server's absolute root (issue 13, item 9).
    with pytest.raises(NotFoundError, match="resolved against the first allowed root") as e:
        resolve_local_path("missing.mp4", [str(root)], 10)
    assert str(root.resolve()) not in e.value.message
    with pytest.raises(ForbiddenSourceError, match="disabled"):
        resolve_local_path("ok.mp4", [], 10)


@pytest.mark.parametrize(
    "address,kind",
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.1.20", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata endpoints
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6 is judged by its IPv4 address
        ("0.0.0.0", "private"),
        ("100.64.0.1", "non-public"),  # carrier-grade NAT
        ("8.8.8.8", None),
        ("2001:4860:4860::8888", None),
    ],
)
def test_address_kinds(address, kind):
    assert address_kind(address) == kind


def test_urls_to_private_addresses_are_403_after_resolution():
    cfg = SourcesConfig()
    res = resolver({"cam.example.com": ["93.184.216.34"], "nas.example.com": ["93.184.216.34", "192.168.1.20"]})
    ok = check_url("rtsp://user:pw@cam.example.com/stream1", cfg, resolve=res)
    assert (ok.scheme, ok.host, ok.port, ok.addresses) == ("rtsp", "cam.example.com", 554, ("93.184.216.34",))
    assert ok.with_address("93.184.216.34") == "rtsp://user:pw@93.184.216.34:554/stream1"
    # One private address among the answers is enough to refuse (the client could land on it).
    with pytest.raises(ForbiddenSourceError, match=r"192\.168\.1\.20, which is a private address"):
        check_url("http://nas.example.com/a.mp4", cfg, resolve=res)
    with pytest.raises(ForbiddenSourceError, match="loopback"):
        check_url("http://127.0.0.1:8000/a.mp4", cfg, resolve=socket.getaddrinfo)
    with pytest.raises(ForbiddenSourceError, match="link-local"):
        check_url("http://169.254.169.254/latest/meta-data", cfg, resolve=socket.getaddrinfo)
    allowed = check_url("http://127.0.0.1:8000/a.mp4", SourcesConfig(allow_private_networks=True))
    assert allowed.addresses == ("127.0.0.1",)


def test_url_scheme_and_shape_rules():
    res = resolver({"h.example.com": ["93.184.216.34"]})
    with pytest.raises(InvalidRequestError, match="scheme 'ftp'"):
        check_url("ftp://h.example.com/a.mp4", SourcesConfig(), resolve=res)
    with pytest.raises(InvalidRequestError, match="no host"):
        check_url("http:///a.mp4", SourcesConfig(), resolve=res)
    with pytest.raises(ForbiddenSourceError, match="rtsp URLs are disabled"):
        check_url("rtsp://h.example.com/s", SourcesConfig(url_schemes=["http", "https"]), resolve=res)
    with pytest.raises(UnprocessableClipError, match="cannot resolve"):
        check_url("http://nowhere.invalid/a.mp4", SourcesConfig(), resolve=res)
    https = check_url("https://h.example.com:8443/a.mp4", SourcesConfig(), resolve=res)
    assert https.host_header == "h.example.com:8443" and https.with_address("93.184.216.34").startswith(
        "https://93.184.216.34:8443/"
    )


def test_allowed_networks_open_a_camera_vlan_and_nothing_else():
    cfg = SourcesConfig(allowed_networks=["10.20.0.0/16"])
    res = resolver({"cam1.lan": ["10.20.3.4"], "nvr.lan": ["10.30.0.1"], "meta": ["169.254.169.254"]})
    assert check_url("rtsp://cam1.lan/stream", cfg, resolve=res).addresses == ("10.20.3.4",)
    for host in ("nvr.lan", "meta"):
        with pytest.raises(ForbiddenSourceError, match="allowed_networks"):
            check_url(f"rtsp://{host}/stream", cfg, resolve=res)
    with pytest.raises(ForbiddenSourceError, match="loopback"):
        check_url("http://127.0.0.1/a.mp4", cfg, resolve=socket.getaddrinfo)
