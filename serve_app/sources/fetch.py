"""Downloads an ``http(s)://`` clip with size and time limits, to checked addresses only.

:func:`fetch_url` resolves the host (:func:`serve_app.sources.rules.check_url`),
refuses non-public addresses unless the config allows them, and connects to
the checked address itself (the request carries the original ``Host`` header
and TLS server name, and the certificate is verified against that name), so
the address cannot change between the check and the connection. Redirects
are followed by hand, each hop checked again. The body is streamed and cut
off at ``max_bytes``; connect, read and total times are bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

import httpx

from serve_app.config import SourcesConfig
from serve_app.errors import SizeLimit, UnprocessableClipError, UpstreamTimeoutError
from serve_app.log_limit import get_logger
from serve_app.sources.rules import CheckedURL, check_url, tls_verify

logger = get_logger(__name__)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def fetch_url(
    url: str, sources: SourcesConfig, max_bytes: int, *, resolve: Callable[..., list[tuple[Any, ...]]] | None = None
) -> bytes:
    """The body of an ``http(s)`` URL.

    Args:
        url: the clip's URL.
        sources: URL rules and timeouts (``url_*_timeout_s``, ``url_max_redirects``,
            ``allow_private_networks``, ``url_schemes``).
        max_bytes: largest accepted body, in bytes.
        resolve: ``socket.getaddrinfo``-compatible resolver (tests inject one).

    Returns:
        The body bytes.

    Raises:
        InvalidRequestError (400): malformed URL or unsupported scheme.
        ForbiddenSourceError (403): scheme disabled, or a hop resolves to a non-public address.
        PayloadTooLargeError (413): ``Content-Length`` or the streamed body exceeds ``max_bytes``.
        UnprocessableClipError (422): unresolvable host, refused connection, HTTP error status,
            TLS failure or too many redirects.
        UpstreamTimeoutError (504): connect, read or total time limit exceeded.
    """
    deadline = time.monotonic() + sources.url_total_timeout_s
    timeout = httpx.Timeout(
        connect=sources.url_connect_timeout_s,
        read=sources.url_read_timeout_s,
        write=sources.url_read_timeout_s,
        pool=sources.url_connect_timeout_s,
    )
    kwargs = {} if resolve is None else {"resolve": resolve}
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, verify=tls_verify()) as client:
        for _hop in range(sources.url_max_redirects + 1):
            checked = check_url(url, sources, **kwargs)
            if checked.scheme not in ("http", "https"):
                raise UnprocessableClipError(f"a redirect led to a {checked.scheme} URL", param="video_url")
            location = _get(client, checked, max_bytes, deadline, sources)
            if isinstance(location, bytes):
                return location
            url = urljoin(url, location)
    raise UnprocessableClipError(
        f"video_url redirected more than {sources.url_max_redirects} times (sources.url_max_redirects)",
        param="video_url",
    )


def _get(
    client: httpx.Client, checked: CheckedURL, max_bytes: int, deadline: float, sources: SourcesConfig
) -> bytes | str:
    """One GET to the checked addresses: the body, or a redirect's ``Location``."""
    last_error: Exception | None = None
    for address in checked.addresses:
        pinned = checked.pinned(address)
        headers = {**pinned.headers, "Accept": "video/*, application/octet-stream;q=0.9, */*;q=0.5"}
        try:
            with client.stream("GET", pinned.url, headers=headers, extensions=pinned.extensions) as r:
                if r.status_code in _REDIRECTS and r.headers.get("location"):
                    return r.headers["location"]
                if r.status_code >= 400:
                    raise UnprocessableClipError(
                        f"video_url answered HTTP {r.status_code} {r.reason_phrase}", param="video_url"
                    )
                limit = SizeLimit(max_bytes, what="video_url content", param="video_url")
                limit.check_declared(r.headers.get("content-length"))
                body = bytearray()
                for chunk in r.iter_bytes():
                    body += chunk
                    limit.check_received(len(body))
                    if time.monotonic() > deadline:
                        raise _too_slow(sources, len(body))
                if time.monotonic() > deadline:
                    raise _too_slow(sources, len(body))
                return bytes(body)
        except httpx.ConnectTimeout as e:
            last_error = e  # try the host's next address
        except httpx.ConnectError as e:
            last_error = e
        except httpx.TimeoutException as e:
            raise UpstreamTimeoutError(
                f"video_url host {checked.host} sent nothing for {sources.url_read_timeout_s:.0f} s "
                "(sources.url_read_timeout_s)",
                param="video_url",
            ) from e
        except httpx.HTTPError as e:
            raise UnprocessableClipError(
                f"video_url could not be read ({type(e).__name__}: {e})", param="video_url"
            ) from e
    if isinstance(last_error, httpx.ConnectTimeout):
        raise UpstreamTimeoutError(
            f"could not connect to video_url host {checked.host} within {sources.url_connect_timeout_s:.0f} s "
            "(sources.url_connect_timeout_s)",
            param="video_url",
        )
    raise UnprocessableClipError(
        f"could not connect to video_url host {checked.host} ({last_error})", param="video_url"
    )


def _too_slow(sources: SourcesConfig, received: int) -> UpstreamTimeoutError:
    return UpstreamTimeoutError(
        f"downloading video_url took longer than {sources.url_total_timeout_s:.0f} s "
        f"(sources.url_total_timeout_s; {received} bytes received)",
        param="video_url",
    )
