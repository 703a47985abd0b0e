"""An ``http(s)://`` camera body as a file for PyAV, read over a connection pinned to the checked address.

FFmpeg's own HTTP client would resolve the camera's name again (a DNS answer that changed since
:func:`serve_app.sources.rules.check_url` could point it inside), follows redirects to any host, and
its TLS does not verify certificates unless told to. So FFmpeg never opens the URL: a
:class:`PinnedHttpBody` reads it with httpx, connected to the checked address
(:meth:`serve_app.sources.rules.CheckedURL.pinned`: ``Host`` keeps the name; for ``https`` TLS sends the
name as SNI and verifies the certificate against it), with redirects refused and no proxy from
the environment, and PyAV demuxes the body through the file interface (``av.open(body, format=...)``).

A body whose server accepts byte ranges (``Accept-Ranges: bytes`` and a ``Content-Length``: a
file on a web server, e.g. an MP4 whose ``moov`` box is at its end) is seekable: a seek opens a
new request with a ``Range`` header, to the same checked address. A live body is read once,
front to back.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx

from serve_app.errors import UnprocessableClipError, UnsupportedMediaError, declared_length
from serve_app.sources.rules import CheckedURL, tls_verify


class PinnedHttpBody(io.RawIOBase):
    """The body of one ``http(s)`` URL, read from its checked address (see the module docstring).

    Args:
        checked: the URL as :func:`serve_app.sources.rules.check_url` passed it (``http`` or ``https``).
        connect_timeout_s: seconds to connect (and finish the TLS handshake).
        read_timeout_s: seconds a read may wait for the next bytes (a stalled camera raises
            ``httpx.ReadTimeout`` after this long).
        param: the request field named in errors.

    Raises (on construction, the first request):
        UnsupportedMediaError (415): the URL redirects (redirects are not followed).
        UnprocessableClipError (422): the server answered with an error status.
        httpx.HTTPError: connection refused, TLS failure (e.g. a certificate not valid for the
            host name), timeouts (the caller retries).
    """

    def __init__(self, checked: CheckedURL, connect_timeout_s: float, read_timeout_s: float, param: str = "url"):
        super().__init__()
        self.checked, self.param = checked, param
        self._client = httpx.Client(
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            follow_redirects=False,
            trust_env=False,
            verify=tls_verify(),
        )
        self._response: httpx.Response | None = None
        self._chunks: Iterator[bytes] = iter(())
        self._buf = bytearray()
        self._pos = 0
        try:
            first = self._request(0)
        except BaseException:
            self._client.close()
            raise
        self.content_type = first.headers.get("content-type", "").lower()
        #: The body's size in bytes, if the server said (None for a live body).
        self.size = declared_length(first.headers.get("content-length"))
        self._seekable = self.size is not None and first.headers.get("accept-ranges", "").lower() == "bytes"

    def _request(self, start: int) -> httpx.Response:
        """Opens the body at byte ``start`` (``Range`` when not 0) on the checked address."""
        self._close_response()
        pinned = self.checked.pinned()
        headers = {**pinned.headers, "Accept-Encoding": "identity"}
        if start:
            headers["Range"] = f"bytes={start}-"
        request = self._client.build_request("GET", pinned.url, headers=headers, extensions=pinned.extensions)
        r = self._client.send(request, stream=True)
        if 300 <= r.status_code < 400:
            r.close()
            raise UnsupportedMediaError(
                "the camera URL redirects; give the final URL (redirects are not followed for live streams)",
                param=self.param,
            )
        if r.status_code >= 400 or (start and r.status_code != 206):
            r.close()
            raise UnprocessableClipError(f"the camera URL answered HTTP {r.status_code}", param=self.param)
        self._response, self._chunks, self._buf, self._pos = r, r.iter_bytes(), bytearray(), start
        return r

    def peek(self, n: int) -> bytes:
        """Up to ``n`` bytes from the current position, without consuming them (format sniffing)."""
        while len(self._buf) < n:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._buf += chunk
        return bytes(self._buf[:n])

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (at least one unless the body ended); b"" at the end."""
        if not self._buf:
            self._buf += next(self._chunks, b"")
        n = len(self._buf) if size is None or size < 0 else min(size, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        self._pos += n
        return out

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        """Whether the server takes byte ranges (``Accept-Ranges: bytes`` with a ``Content-Length``)."""
        return self._seekable

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Moves to a byte offset; a move other than to the current position opens a ranged request.

        Raises:
            OSError: the body is not seekable, or the offset is outside it.
        """
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self._pos + offset}.get(
            whence, (self.size or 0) + offset
        )
        if target == self._pos:
            return target
        if not self._seekable or self.size is None or not 0 <= target <= self.size:
            raise OSError(f"cannot seek to byte {target} of the camera body")
        if self._pos < target <= self._pos + len(self._buf):  # within what is already buffered
            del self._buf[: target - self._pos]
            self._pos = target
            return target
        if target == self.size:
            self._close_response()
            self._chunks, self._buf, self._pos = iter(()), bytearray(), target
            return target
        self._request(target)
        return target

    def _close_response(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def close(self) -> None:
        """Closes the connection (idempotent)."""
        if not self.closed:
            self._close_response()
            self._client.close()
        super().close()
