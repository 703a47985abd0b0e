"""The header guards (serve_app.http.guards.headers): control headers a client may not send, and cross-site
requests that change state (issue 25, item 8), driven as plain ASGI apps."""

import asyncio
import json

import pytest
from asgi_calls import body_reader, call, chunks, reject, scope

from serve_app.http.guards.headers import ControlHeaderGuard


def test_control_headers_are_refused_whatever_their_spelling():
    guard = ControlHeaderGuard(
        body_reader(None), ["x-request-disconnect-disabled", "serve_multiplexed_model_id"], reject
    )
    for name in ("X-Request-Disconnect-Disabled", "serve-multiplexed-model-id", "SERVE_MULTIPLEXED_MODEL_ID"):
        status, _, body = asyncio.run(call(guard, scope(headers=[(name, "?1")]), chunks([])))
        assert status == 400
        err = json.loads(body)["error"]
        assert err["param"] == name.lower() and name.lower() in err["message"]
    status, _, _ = asyncio.run(call(guard, scope(headers=[("x-request-id", "abc")]), chunks([])))
    assert status == 200


# --- issue 25, item 8: cross-site request forgery ------------------------------------------------------


@pytest.mark.parametrize(("method", "headers", "refused"), [
    ("POST", {"origin": "https://evil.example"}, True),
    ("POST", {"sec-fetch-site": "cross-site"}, True),
    ("POST", {"sec-fetch-site": "same-site", "origin": "http://other.local:8000"}, True),
    ("POST", {"origin": "null"}, True),  # a sandboxed iframe or a file:// page
    ("DELETE", {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, True),
    ("PUT", {"origin": "http://127.0.0.1:8001"}, True),  # another port is another origin
    ("POST", {"origin": "http://127.0.0.1:8000"}, False),  # the dashboard's own origin
    ("POST", {"origin": "http://127.0.0.1:8000", "sec-fetch-site": "same-origin"}, False),
    ("POST", {"sec-fetch-site": "none"}, False),  # typed by the user
    ("POST", {}, False),  # curl, SDKs
    ("POST", {"origin": "https://cams.example.com", "sec-fetch-site": "cross-site"}, False),  # allowed
    ("POST", {"origin": "HTTPS://Cams.Example.com:443"}, False),
    ("GET", {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, False),  # reads change nothing
])  # fmt: skip
def test_state_changing_requests_from_other_sites_are_refused(method, headers, refused):
    from serve_app.http.guards.headers import CrossSiteGuard

    async def run():
        guard = CrossSiteGuard(body_reader(None), ["https://cams.example.com/"], reject)
        sc = {**scope("/v1/streams", headers=[("host", "127.0.0.1:8000"), *headers.items()]), "method": method}
        receive = chunks([10])
        return await call(guard, sc, receive), receive

    (status, _, body), receive = asyncio.run(run())
    if refused:
        err = json.loads(body)["error"]
        assert status == 403 and err["type"] == "cross_site_request" and receive.counter["read"] == 0
        assert "security.allowed_origins" in err["message"] and "evil" not in err["message"]
    else:
        assert status == 200


def test_the_origin_of_a_header_or_a_setting():
    from serve_app.http.guards.headers import origin_of

    assert origin_of("HTTP://Example.COM:80/") == "http://example.com"
    assert origin_of("https://[::1]:8443") == "https://[::1]:8443"
    assert origin_of("null") is None and origin_of("file:///x") is None and origin_of("http://[::1") is None
