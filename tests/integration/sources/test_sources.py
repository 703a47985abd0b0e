"""Clip source rules: exactly one source, allowed roots for paths, public addresses for URLs."""

import socket

import pytest

from serve_app.config import SourcesConfig
from serve_app.errors import ForbiddenSourceError, InvalidRequestError, NotFoundError, UnprocessableClipError
from serve_app.protocol import ClipSource
from serve_app.sources.rules import address_kind, check_url, resolve_local_path
from serve_app.sources.special_addresses import IPV4_BLOCKS, IPV6_BLOCKS, special_block


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
        ("127.0.0.1", "127.0.0.0/8, reserved for loopback (RFC 1122)"),
        ("::1", "::1/128, reserved for loopback (RFC 4291)"),
        ("10.1.2.3", "10.0.0.0/8, reserved for private use (RFC 1918)"),
        ("192.168.1.20", "192.168.0.0/16, reserved for private use (RFC 1918)"),
        ("169.254.169.254", "169.254.0.0/16, reserved for link-local addresses (RFC 3927)"),  # cloud metadata
        ("fe80::1%eth0", "fe80::/10, reserved for link-local addresses (RFC 4291)"),
        ("::ffff:127.0.0.1", "::ffff:0:0/96, reserved for IPv4-mapped addresses (RFC 4291)"),
        ("0.0.0.0", "0.0.0.0/32, reserved for 'this host on this network' (RFC 1122)"),
        ("100.64.0.1", "100.64.0.0/10, reserved for shared address space (carrier-grade NAT) (RFC 6598)"),
        ("8.8.8.8", None),
        ("2001:4860:4860::8888", None),
    ],
)
def test_address_kinds(address, kind):
    assert address_kind(address) == kind


#: Issue 25 item 13: the addresses that passed as public (192.0.0.8 let a stream connect out), each
#: refused in-process (never by connecting) and named by its block, most specific first.
FORMERLY_PUBLIC = {
    "192.0.0.8": "192.0.0.8/32, reserved for the IPv4 dummy address",
    "192.0.0.9": "192.0.0.9/32, reserved for the Port Control Protocol anycast address",
    "192.0.0.10": "192.0.0.10/32, reserved for the TURN",
    "192.31.196.1": "192.31.196.0/24, reserved for AS112 DNS service",
    "192.52.193.1": "192.52.193.0/24, reserved for automatic multicast tunneling",
    "192.88.99.1": "192.88.99.0/24, reserved for 6to4 relay anycast",
    "192.175.48.1": "192.175.48.0/24, reserved for direct delegation AS112 service",
    "fec0::1": "fec0::/10, reserved for site-local addresses",
    "3fff::1": "3fff::/20, reserved for documentation",
    "5f00::1": "5f00::/16, reserved for segment routing",
}


@pytest.mark.parametrize("address", sorted(FORMERLY_PUBLIC))
def test_special_purpose_addresses_that_passed_as_public_are_refused_by_block(address):
    assert address_kind(address).startswith(FORMERLY_PUBLIC[address])
    literal = f"[{address}]" if ":" in address else address
    for url in (f"http://{literal}/a.mp4", f"rtsp://{literal}/s"):  # a literal: no DNS, no connection
        with pytest.raises(ForbiddenSourceError, match="reserved for") as e:
            check_url(url, SourcesConfig())
        assert "private address" not in e.value.message and address in e.value.message


@pytest.mark.parametrize("block", IPV4_BLOCKS + IPV6_BLOCKS, ids=lambda b: str(b.network))
def test_every_registry_entry_is_refused_at_its_first_last_and_middle_address(block):
    net = block.network
    def url(ip) -> str:
        return f"http://[{ip}]/x" if ip.version == 6 else f"http://{ip}/x"

    for ip in {net.network_address, net.broadcast_address, net.network_address + net.num_addresses // 2}:
        kind = address_kind(str(ip))
        assert kind is not None and "reserved for" in kind, ip
        # a more specific entry may name it, never a wider one
        assert special_block(str(ip)).network.prefixlen >= net.prefixlen
        with pytest.raises(ForbiddenSourceError, match="reserved for"):
            check_url(url(ip), SourcesConfig())
    allowed = SourcesConfig(allowed_networks=[str(net)])  # the operator can open any block
    assert check_url(url(net.network_address), allowed).addresses


def test_the_table_holds_every_iana_entry_whatever_its_globally_reachable_flag():
    cidrs = {str(b.network) for b in IPV4_BLOCKS + IPV6_BLOCKS}
    assert {"192.0.0.9/32", "192.0.0.10/32", "192.31.196.0/24", "192.52.193.0/24", "192.175.48.0/24",
            "64:ff9b::/96", "2001:1::1/128", "2001:3::/32", "2001:4:112::/48", "2001:20::/28", "2001:30::/28",
            "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fec0::/10", "224.0.0.0/4", "ff00::/8"} <= cidrs
    assert len(IPV4_BLOCKS) == 27 and len(IPV6_BLOCKS) == 27
    for public in ("8.8.8.8", "1.1.1.1", "93.184.216.34", "2001:4860:4860::8888", "2606:4700::1111"):
        assert address_kind(public) is None


def test_urls_to_private_addresses_are_403_after_resolution():
    cfg = SourcesConfig()
    res = resolver({"cam.example.com": ["93.184.216.34"], "nas.example.com": ["93.184.216.34", "192.168.1.20"]})
    ok = check_url("rtsp://user:pw@cam.example.com/stream1", cfg, resolve=res)
    assert (ok.scheme, ok.host, ok.port, ok.addresses) == ("rtsp", "cam.example.com", 554, ("93.184.216.34",))
    assert ok.with_address("93.184.216.34") == "rtsp://user:pw@93.184.216.34:554/stream1"
    # One private address among the answers is enough to refuse (the client could land on it).
    with pytest.raises(ForbiddenSourceError, match=r"192\.168\.1\.20, which is in 192\.168\.0\.0/16, reserved"):
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
