"""The typed config, request validation, and the error mapping."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from serve_app.config import AppConfig, app_config_from_file
from serve_app.errors import (
    ErrorInfo,
    ForbiddenSourceError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    internal_error,
    to_http,
)
from serve_app.http.query.parsing import validate_query
from serve_app.http.query.protocol import sampling_options
from serve_app.sources.rules import resolve_local_path

ROOT = Path(__file__).resolve().parents[3]


def test_config_rejects_unknown_keys():
    with pytest.raises(ValidationError, match="extra"):
        AppConfig.model_validate({"model": {"modle_id": "x"}})


def test_every_config_file_maps_onto_the_config_model():
    files = sorted((ROOT / "configs").glob("*.yaml"))
    assert files
    for f in files:
        app_config_from_file(f)


def test_recipe_sampling_defaults_and_overrides():
    cfg = AppConfig()
    q = validate_query({"question": "q"}, cfg)
    s = sampling_options(q, cfg)
    assert (s.temperature, s.top_p, s.repetition_penalty, s.max_tokens) == (0.6, 0.95, 1.05, 4096)
    q = validate_query({"question": "q", "temperature": "0", "max_tokens": "7"}, cfg)
    s = sampling_options(q, cfg)
    assert (s.temperature, s.max_tokens) == (0.0, 7)


@pytest.mark.parametrize(
    "fields,param",
    [
        ({}, "question"),
        ({"question": "q", "fps": "0"}, "fps"),
        ({"question": "q", "fps": "abc"}, "fps"),
        ({"question": "q", "max_frames": "1000000"}, "max_frames"),
        ({"question": "q", "max_tokens": "999999"}, "max_tokens"),
        ({"question": "q", "start_s": "5", "end_s": "4"}, "end_s"),
        ({"question": "q", "ignore_eos": "true"}, "ignore_eos"),
        ({"question": "q", "colour": "red"}, "colour"),
        ({"question": "q", "seed": 2**70}, "seed"),  # past int64: torch.manual_seed would overflow (was a 500)
        ({"question": "q", "seed": -1}, "seed"),
        ({"question": "q", "fps": "NaN"}, "fps"),
        ({"question": "q", "end_s": float("inf")}, "end_s"),
    ],
)
def test_bad_fields_are_400_naming_the_field(fields, param):
    with pytest.raises(InvalidRequestError) as e:
        validate_query(fields, AppConfig())
    assert e.value.param == param and e.value.status == 400
    if param in ("fps", "end_s") and fields.get(param) in ("NaN", float("inf")):
        assert "finite number" in e.value.message, e.value.message
    if param == "seed":  # names the limit it broke
        limit = str(2**63 - 1) if fields["seed"] > 0 else "equal to 0"
        assert limit in e.value.message, e.value.message


def test_json_bodies_nested_too_deeply_or_not_objects_are_400():
    from serve_app.http.json_body import parse_json_object

    for raw, words in ((b"{\"a\":" + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
                       (b"[1, 2]", "must be an object"), (b"\xff", "not valid JSON")):
        with pytest.raises(InvalidRequestError, match=words):
            parse_json_object(raw)
    assert parse_json_object(b'{"question": "q"}') == {"question": "q"}


def test_a_client_that_disconnects_mid_body_is_499_not_500():
    import asyncio

    from starlette.requests import Request

    from serve_app.errors import ClientClosedRequestError
    from serve_app.http.json_body import read_body

    messages = [{"type": "http.request", "body": b'{"que', "more_body": True}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0)

    request = Request({"type": "http", "method": "POST", "headers": []}, receive)
    with pytest.raises(ClientClosedRequestError) as e:
        asyncio.run(read_body(request, 1 << 20))
    assert to_http(e.value)[0] == 499


def test_error_shape_and_retry_after():
    status, body, headers = to_http(OverloadedError("busy", retry_after_s=2))
    assert status == 503 and headers == {"Retry-After": "2"}
    assert body == {"error": {"type": "overloaded", "message": "busy", "param": None}}
    info = internal_error("rid-1")
    assert to_http(info)[0] == 500 and "rid-1" in info.message and "Traceback" not in info.message
    assert isinstance(InvalidRequestError("x").info(), ErrorInfo)


def test_local_paths_stay_inside_allowed_roots(tmp_path):
    root = tmp_path / "clips"
    root.mkdir()
    (root / "a.mp4").write_bytes(b"x")
    (tmp_path / "secret.mp4").write_bytes(b"x")
    (root / "link.mp4").symlink_to(tmp_path / "secret.mp4")
    assert resolve_local_path("a.mp4", [str(root)], 10) == (root / "a.mp4").resolve()
    for bad in ["../secret.mp4", str(tmp_path / "secret.mp4"), "link.mp4", "/etc/passwd"]:
        with pytest.raises(ForbiddenSourceError):
            resolve_local_path(bad, [str(root)], 10)
    with pytest.raises(NotFoundError):
        resolve_local_path("missing.mp4", [str(root)], 10)
    with pytest.raises(ForbiddenSourceError, match="disabled"):
        resolve_local_path("a.mp4", [], 10)


def test_unresolvable_or_irregular_local_paths_are_400_not_500(tmp_path):
    import os

    root = tmp_path / "clips"
    root.mkdir()
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    os.mkfifo(root / "pipe.mp4")
    (root / "dir.mp4").mkdir()
    cases = [
        ("a" * 300, "cannot be resolved"),  # one name longer than NAME_MAX (was OSError → 500)
        ("loop1", "cannot be resolved"),  # a symlink loop (was OSError → 500)
        ("pipe.mp4", "not a regular file"),
        ("dir.mp4", "not a regular file"),
        ("a/" * 2100, "the limit is 4096"),
    ]
    for path, words in cases:
        with pytest.raises(InvalidRequestError, match=words) as e:
            resolve_local_path(path, [str(root)], 10)
        assert e.value.status == 400 and e.value.param == "video_path" and len(e.value.message) < 400


def test_override_derives_a_validated_config():
    from serve_app.config import load_serve_config, override

    doc = load_serve_config(ROOT / "configs" / "h200.yaml")
    out = override(
        doc, ["model.model_id=/ckpt/dummy", "model.engine_args.load_format=dummy", "model.preprocess_threads=4"]
    )
    args = out["applications"][0]["args"]
    assert args["model"]["model_id"] == "/ckpt/dummy" and args["model"]["preprocess_threads"] == 4
    assert args["model"]["engine_args"]["load_format"] == "dummy"
    assert (
        args["model"]["engine_args"]["max_num_seqs"]
        == doc["applications"][0]["args"]["model"]["engine_args"]["max_num_seqs"]
    )
    assert doc["applications"][0]["args"]["model"]["model_id"] == "nvidia/Cosmos-Reason1-7B"  # input untouched
    with pytest.raises(ValidationError):
        override(doc, ["model.bogus=1"])
    with pytest.raises(ValueError):
        override(doc, ["model.model_id"])
