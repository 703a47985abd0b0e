"""Where a clip comes from, and the rules each kind of source must pass.

A :class:`serve_app.protocol.ClipSource` is a value that crosses deployment handles: uploaded
bytes, a local path that must resolve (``..`` and symlinks followed) inside
one of the configured allowed roots, or a URL (``http``, ``https``,
``rtsp``) whose host must resolve to public addresses unless the config
allows private networks. The checks run where the source is read (the
decoder replica). Everything that connects to a URL connects to the very
address checked here (:meth:`CheckedURL.pinned` for httpx: :mod:`serve_app.sources.fetch`,
:mod:`serve_app.cameras.webhook`, :mod:`serve_app.sources.http_source`; the RTSP relay for
:mod:`serve_app.decode.capture` and :mod:`serve_app.cameras.opening`), never to the
name again, so a DNS answer that changes between check and use (DNS
rebinding) cannot redirect it inside; https still sends the name as SNI and
verifies the certificate against the name.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
import ssl
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from serve_app.config import SourcesConfig
from serve_app.errors import (
    ForbiddenSourceError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    UnresolvableHostError,
)
from serve_app.sources.special_addresses import describe, special_block

#: Default ports of the URL schemes (RFC 9110, RFC 7826).
DEFAULT_PORTS = {"http": 80, "https": 443, "rtsp": 554}

#: How ``https`` connections (clip URLs, cameras, webhooks) verify server certificates: True =
#: httpx's default CA bundle (certifi); the https tests put an ``ssl.SSLContext`` trusting their own CA here.
TLS_VERIFY: ssl.SSLContext | bool = True


def tls_verify() -> ssl.SSLContext | bool:
    """httpx's ``verify`` for https connections to checked URLs (:data:`TLS_VERIFY`, read at each call)."""
    return TLS_VERIFY


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def url_scheme(value: str) -> str | None:
    """The scheme of ``value``, lower case, if it is a URL (``scheme://…``); None if it is a file path.

    The one place that tells a URL from a path: ``HTTP://cam/x`` is a URL everywhere (was: a URL when a
    stream was registered, a file path when its reader opened it), ``dir/a://b`` a path.
    """
    head, sep, _ = value.partition("://")
    return head.lower() if sep and _SCHEME.fullmatch(head) else None


def normalize_url(value: str) -> str:
    """``value`` with its URL scheme in lower case (a file path is returned as it is)."""
    scheme = url_scheme(value)
    return value if scheme is None else scheme + value[len(scheme) :]


#: Longest ``video_path`` accepted, in characters (Linux's PATH_MAX).
MAX_PATH_CHARS = 4096


def _shown(path: str, limit: int = 200) -> str:
    """``path`` as the client gave it, for messages and logs: repr'd (control characters escaped),
    cut to ``limit`` characters. Messages never show the server's roots or the resolved path."""
    return repr(path if len(path) <= limit else path[:limit] + "…")


def resolve_local_path(path: str, allowed_roots: list[str], max_bytes: int) -> Path:
    """Resolves ``path`` and checks it lies inside an allowed root.

    ``..`` components and symlinks are resolved before the check, so neither
    can escape a root.

    Args:
        path: absolute path, or relative to the first allowed root.
        allowed_roots: directories clips may be read from.
        max_bytes: largest accepted file size in bytes.

    Returns:
        The resolved path of an existing regular file.

    Raises:
        ForbiddenSourceError (403): no roots configured, or the path resolves outside them.
        NotFoundError (404): no such file under an allowed root.
        PayloadTooLargeError (413): the file exceeds ``max_bytes``.
        InvalidRequestError (400): empty, longer than :data:`MAX_PATH_CHARS`, not resolvable
            (a name too long for the file system, a symlink loop), or not a regular file.
    """
    if not path or "\x00" in path:
        raise InvalidRequestError("video_path is empty or contains a NUL byte", param="video_path")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no file system name
        raise InvalidRequestError("video_path is not valid Unicode (a lone surrogate)", param="video_path") from None
    if len(path) > MAX_PATH_CHARS:
        raise InvalidRequestError(
            f"video_path is {len(path)} characters; the limit is {MAX_PATH_CHARS}", param="video_path"
        )
    if not allowed_roots:
        raise ForbiddenSourceError(
            "local file paths are disabled on this server (sources.allowed_roots is empty)", param="video_path"
        )
    roots = [Path(r).resolve() for r in allowed_roots]
    p = Path(path)
    try:
        candidate = (p if p.is_absolute() else roots[0] / p).resolve()
        if not any(candidate == r or r in candidate.parents for r in roots):
            raise ForbiddenSourceError(
                f"video_path {_shown(path)} is outside the allowed roots (sources.allowed_roots)",
                param="video_path",
            )
        info = candidate.stat()
    except FileNotFoundError:
        info = None
    except (OSError, RuntimeError) as e:  # ENAMETOOLONG, ELOOP (RuntimeError: symlink loop in resolve)
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InvalidRequestError(
            f"video_path {_shown(path)} cannot be resolved ({reason})", param="video_path"
        ) from None
    if info is None:
        raise NotFoundError(
            f"video_path {_shown(path)}: no such file under the allowed roots (a relative path is resolved "
            "against the first allowed root)",
            param="video_path",
        )
    if not stat.S_ISREG(info.st_mode):
        raise InvalidRequestError(f"video_path {_shown(path)} is not a regular file", param="video_path")
    if info.st_size > max_bytes:
        raise PayloadTooLargeError(
            f"video file is {info.st_size} bytes; the limit is {max_bytes} bytes", param="video_path"
        )
    return candidate


@dataclasses.dataclass(frozen=True)
class CheckedURL:
    """A URL that passed the scheme and address rules.

    Attributes:
        url: the URL as given.
        scheme: ``http``, ``https`` or ``rtsp``.
        host: the host name (or literal address) of the URL.
        port: the TCP port (the scheme's default if the URL names none).
        addresses: the host's addresses, each allowed by the policy; connect to these only.
    """

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]

    def with_address(self, address: str) -> str:
        """The URL with its host replaced by ``address`` (IPv6 in brackets), user info and path kept."""
        parts = urlsplit(self.url)
        literal = f"[{address}]" if ":" in address else address
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"{literal}:{self.port}"
        return parts._replace(netloc=netloc).geturl()

    @property
    def host_header(self) -> str:
        """The ``Host`` header value of the original URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS.get(self.scheme) else f"{host}:{self.port}"

    def pinned(self, address: str | None = None) -> PinnedRequest:
        """How an httpx request reaches ``address`` (default: the first checked one) and nothing else.

        The URL names the address itself, so httpx does no lookup of its own (a DNS answer that
        changed since the check cannot send it elsewhere); the ``Host`` header keeps the name,
        and for ``https`` httpcore's ``sni_hostname`` request extension makes TLS send the name
        as SNI and verify the certificate against the name, not the address
        (httpcore ``_async/connection.py``: ``server_hostname=sni_hostname or origin host``).

        Raises:
            ValueError: ``address`` is not one of :attr:`addresses`.
        """
        address = self.addresses[0] if address is None else address
        if address not in self.addresses:
            raise ValueError(f"{address} is not a checked address of {self.host}")
        return PinnedRequest(
            url=self.with_address(address),
            headers={"Host": self.host_header},
            extensions={"sni_hostname": self.host} if self.scheme == "https" else {},
        )


@dataclasses.dataclass(frozen=True)
class PinnedRequest:
    """The parts of an httpx request pinned to a checked address (:meth:`CheckedURL.pinned`).

    Attributes:
        url: the URL with the checked address as its host.
        headers: ``Host`` (the original host name, and port when not the scheme's default).
        extensions: ``{"sni_hostname": host}`` for https, else empty (httpcore request extensions).
    """

    url: str
    headers: dict[str, str]
    extensions: dict[str, str]


def address_kind(address: str) -> str | None:
    """Why ``address`` is not a public unicast address, or None if it is: the special-purpose block that
    holds it, e.g. ``"192.0.0.8/32, reserved for the IPv4 dummy address (RFC 7600)"``.

    One explicit table (:mod:`serve_app.sources.special_addresses`: every entry of IANA's IPv4 and IPv6
    special-purpose registries, site-local and multicast), not Python's version-dependent flags.
    IPv4-mapped, 6to4 and Teredo IPv6 addresses are refused as the registry entries they are.
    """
    block = special_block(address)
    return None if block is None else describe(block)


def _allowed(address: str, networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """``address`` (or the IPv4 address an IPv4-mapped one carries) lies in one of ``networks``."""
    ip = ipaddress.ip_address(address.split("%")[0])
    inner = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return any(ip in n or (inner is not None and inner in n) for n in networks)


def check_url(
    url: str, sources: SourcesConfig, *, resolve: Callable[..., list[tuple[Any, ...]]] | None = None
) -> CheckedURL:
    """Checks a ``video_url`` against the scheme and network rules and resolves its host.

    Args:
        url: the URL.
        sources: the sources config (allowed schemes, private-network policy).
        resolve: ``socket.getaddrinfo``-compatible resolver (tests inject one); None:
            ``socket.getaddrinfo`` as it is at call time.

    Returns:
        The checked URL with the addresses it may connect to; connect to those only
        (:meth:`CheckedURL.pinned`), never to the name again.

    Raises:
        InvalidRequestError (400): not a URL with a host, or a port out of range.
        ForbiddenSourceError (403): scheme not enabled, or the host resolves to an address in a
            special-purpose block (:func:`address_kind`; any of its addresses) outside
            ``sources.allowed_networks`` while ``sources.allow_private_networks`` is off.
        UnresolvableHostError (422, ``unresolvable_host``): the host name does not resolve.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise InvalidRequestError(f"video_url is not a valid URL ({e})", param="video_url") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidRequestError(
            f"video_url scheme {scheme or '(none)'!r} is not supported: use http, https or rtsp", param="video_url"
        )
    if scheme not in sources.url_schemes:
        enabled = ", ".join(sources.url_schemes) or "none"
        raise ForbiddenSourceError(
            f"{scheme} URLs are disabled on this server (sources.url_schemes: {enabled})", param="video_url"
        )
    host = parts.hostname
    if not host:
        raise InvalidRequestError("video_url has no host", param="video_url")
    port = port or DEFAULT_PORTS[scheme]
    try:
        infos = (resolve or socket.getaddrinfo)(host, port, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise UnresolvableHostError(
            f"cannot resolve the video_url host {host!r} ({reason}): check the name, or use the address",
            param="video_url",
        ) from None
    addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise UnresolvableHostError(f"the video_url host {host!r} has no address", param="video_url")
    if not sources.allow_private_networks:
        allowed = sources.allowed_networks
        for address in addresses:
            kind = address_kind(address)
            if kind is not None and not _allowed(address, allowed):
                shown = host if host == address else f"{host!r} resolves to {address}, which"
                raise ForbiddenSourceError(
                    f"video_url host {shown} is in {kind}; this server only connects to public addresses and "
                    "sources.allowed_networks (sources.allow_private_networks is off)",
                    param="video_url",
                )
    return CheckedURL(url=url, scheme=scheme, host=host, port=port, addresses=addresses)
