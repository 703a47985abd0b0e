"""The optional API key (pure)."""

import pytest

from serve_app.errors import AuthenticationError
from serve_app.http.auth import ApiKey
from serve_app.http.guards.request import presented_key


def test_key_comes_from_the_named_environment_variable():
    assert ApiKey.from_env("MY_KEY", {"MY_KEY": " s3cret "}).enabled
    assert not ApiKey.from_env("MY_KEY", {}).enabled
    assert not ApiKey.from_env("MY_KEY", {"MY_KEY": ""}).enabled
    assert not ApiKey.from_env(None, {"MY_KEY": "x"}).enabled


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ({"authorization": "Bearer s3cret"}, True),
        ({"authorization": "bearer s3cret"}, True),
        ({"x-api-key": "s3cret"}, True),
        ({"authorization": "Bearer s3cre"}, False),
        ({"authorization": "Bearer s3cretX"}, False),
        ({"authorization": "Basic s3cret"}, False),
        ({"authorization": "Bearer "}, False),
        ({}, False),
    ],
)
def test_check(headers, ok):
    key = ApiKey("s3cret")
    if ok:
        key.check(headers)
    else:
        with pytest.raises(AuthenticationError) as e:
            key.check(headers)
        assert e.value.status == 401


def test_disabled_key_lets_everything_through():
    ApiKey(None).check({})


def test_missing_and_wrong_keys_say_which():
    with pytest.raises(AuthenticationError, match="missing API key"):
        ApiKey("k").check({})
    with pytest.raises(AuthenticationError, match="invalid API key"):
        ApiKey("k").check({"x-api-key": "j"})
    assert presented_key({"authorization": "Bearer a", "x-api-key": "b"}) == "a"


@pytest.mark.parametrize(
    ("raw_headers", "path", "passed"),
    [
        ([(b"authorization", b"Bearer k")], "/v1/models", True),
        ([(b"x-api-key", b"k"), (b"host", b"127.0.0.1")], "/v1/models", True),
        ([(b"authorization", b"Bearer nope")], "/v1/models", False),
        ([], "/v1/models", False),
        ([], "/healthz", True),  # exempt path
    ],
)
def test_middleware_reads_raw_asgi_headers(raw_headers, path, passed):
    import asyncio

    from serve_app.http.auth import ApiKeyMiddleware

    calls = []

    async def app(scope, receive, send):
        calls.append("app")

    async def reject(scope, receive, send, err):
        calls.append(err.message)

    mw = ApiKeyMiddleware(app, ApiKey("k"), exempt_paths={"/healthz"}, reject=reject)
    scope = {"type": "http", "path": path, "root_path": "", "headers": raw_headers}
    asyncio.run(mw(scope, None, None))
    assert (calls == ["app"]) is passed
    assert len(calls) == 1
