"""Reading a JSON request body (Ray-free; every JSON route: the query and chat routes, the streams API).

:func:`read_body` (bytes, refused past a limit), :func:`require_json` (the declared content type),
:func:`parse_json_object` (a JSON object, oversized integers and lone surrogates refused), and
:func:`validation_error` (the 400 for a pydantic validation failure, naming the field).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request

from serve_app.errors import ClientClosedRequestError, InvalidRequestError, SizeLimit, UnsupportedMediaError


async def read_body(request: Request, max_bytes: int) -> bytearray:
    """The request body, read in chunks and refused past ``max_bytes`` (declared or actual).

    One growing buffer (no list of chunks joined at the end: that held the body twice).

    Raises:
        PayloadTooLargeError (413): ``Content-Length`` or the bytes received exceed ``max_bytes``.
        ClientClosedRequestError (499): the client disconnected before the body was read.
    """
    limit = SizeLimit(max_bytes)
    limit.check_declared(request.headers.get("content-length"))
    body = bytearray()
    try:
        async for chunk in request.stream():
            limit.check_received(len(body) + len(chunk))
            body += chunk
    except ClientDisconnect:
        raise ClientClosedRequestError("the client disconnected while sending the request body") from None
    return body


def require_json(request: Request) -> None:
    """Refuses a body that is not declared ``application/json`` (before reading it).

    Every JSON route that changes state requires it: a web page can send ``text/plain``,
    ``multipart/form-data`` or a form to another site without asking first (no CORS preflight),
    but not ``application/json``.

    Raises:
        UnsupportedMediaError (415): another or no ``Content-Type``.
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        shown = repr(ctype[:64]) if ctype and ctype.isprintable() else "missing"
        raise UnsupportedMediaError(
            f"the request's content type is {shown}: this route takes a JSON body; send Content-Type: "
            "application/json",
            param="Content-Type",
        )


#: Longest JSON integer accepted, in digits (a signed 64-bit integer has at most 19; Python
#: refuses to convert more than 4,300 with a ValueError, which must not become a 500).
MAX_INT_DIGITS = 40


class OversizedInt:
    """A JSON integer of more than :data:`MAX_INT_DIGITS` digits: no field accepts it (400 naming the field)."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"<integer of {self.digits} digits>"


def _parse_int(text: str) -> int | OversizedInt:
    return int(text) if len(text) <= MAX_INT_DIGITS else OversizedInt(len(text))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(obj: Any, path: str = "") -> str | None:
    """The dotted path of the first string in ``obj`` holding a lone UTF-16 surrogate (a JSON
    ``"\\ud800"`` escape), or None. Such strings cannot be encoded as UTF-8 (paths, logs, tokenizers)."""
    if isinstance(obj, str):
        return (path or "body") if _SURROGATE.search(obj) else None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if isinstance(k, str) and _SURROGATE.search(k):
            return f"{path}.{k!a}" if path else f"{k!a}"
        found = _lone_surrogate(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def parse_json_object(raw: bytes | bytearray) -> dict[str, Any]:
    """A JSON request body that must be an object.

    Integers of more than :data:`MAX_INT_DIGITS` digits become :class:`OversizedInt` values,
    which field validation refuses (400 naming the field).

    Raises:
        InvalidRequestError (400): not UTF-8 JSON, nested too deeply to parse, not an object, or
            a string with a lone surrogate escape (names the field).
    """
    try:
        body = json.loads(raw, parse_int=_parse_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"request body is not valid JSON ({e})") from None
    except RecursionError:
        raise InvalidRequestError("request body is not valid JSON (nested too deeply)") from None
    except ValueError as e:  # defence in depth: any other conversion limit
        raise InvalidRequestError(f"request body is not valid JSON ({type(e).__name__})") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("JSON body must be an object")
    bad = _lone_surrogate(body)
    if bad is not None:
        raise InvalidRequestError(
            f"{bad}: the string holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is not a character",
            param=bad,
        )
    return body


def validation_error(e: ValidationError, unknown: str = "unknown field") -> InvalidRequestError:
    """The 400 for a pydantic validation failure, naming the field at fault.

    With unions (e.g. chat ``content``: text or a list of parts) pydantic reports every
    branch; the deepest error is the one about what the client sent, and the branch
    names (``list[ContentPart]``, ``str``) are dropped from the field path.

    Args:
        e: the validation error.
        unknown: the message for a field the model does not know.
    """
    err = max(e.errors(), key=lambda x: len(x.get("loc", ())))
    loc = [str(x) for x in err.get("loc", ())]
    param = ".".join(x for x in loc if not any(c in x for c in "[]()") and x != "str") or None
    msg = err.get("msg", "invalid value")
    if err.get("type") == "extra_forbidden":
        msg = unknown
    return InvalidRequestError(f"{param}: {msg}" if param else msg, param=param)
