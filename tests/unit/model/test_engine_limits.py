"""The context budget of a clip and the mapping of engine exceptions to client errors
(serve_app.model.engine_limits)."""

import pytest

from serve_app.errors import InvalidRequestError
from serve_app.model.engine_limits import TEMPLATE_TOKENS, check_context, engine_error, text_tokens_estimate
from serve_app.model.engines.base import EngineDeadError


def test_a_clip_over_the_context_is_400_naming_max_frames_and_the_limit():
    # 512 frames at the 128·28² minimum frame area (e.g. 1080p under the recipe's pixel budget):
    # 256 frame pairs × (308/14 · 308/14 / 4 = 121) = 30,976 video tokens > 16,384.
    with pytest.raises(InvalidRequestError) as e:
        check_context(512, 308, 308, text_tokens_estimate("You are a helpful assistant.", "What happens?"), 16_384)
    err = e.value
    assert err.param == "max_frames" and err.status == 400
    assert "30976 video tokens" in err.message and "16384" in err.message
    fits = int(err.message.split("at most ")[1].split(" frames")[0])
    assert fits % 2 == 0 and (fits // 2) * 121 <= 16_384 < (fits // 2 + 1) * 121 + 50


def test_a_clip_that_fits_returns_its_video_tokens():
    assert check_context(40, 420, 756, TEMPLATE_TOKENS, 16_384) == 8_100  # sampling.video_tokens' example
    assert check_context(40, 420, 756, TEMPLATE_TOKENS, None) == 8_100


def test_the_text_estimate_grows_with_the_question():
    assert text_tokens_estimate("") == TEMPLATE_TOKENS
    assert text_tokens_estimate("a" * 400) == TEMPLATE_TOKENS + 100


class FakeVLLMValidationError(ValueError):
    """What vLLM raises for a prompt longer than max_model_len (a ValueError subclass)."""


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (
            FakeVLLMValidationError(
                "The decoder prompt (length 20000) is longer than the maximum model length of 16384.\nMake sure"
            ),
            400,
            "invalid_request_error",
        ),
        (TypeError("unexpected keyword"), 400, "invalid_request_error"),
        (EngineDeadError("EngineCore died"), 503, "overloaded"),
        (RuntimeError("CUDA error: an illegal memory access"), 500, "internal_error"),
        (KeyError("x"), 500, "internal_error"),
    ],
)
def test_engine_exceptions_map_to_4xx_503_or_500(exc, status, kind):
    info = engine_error(exc, "req-1", retry_after_s=2)
    assert (info.status, info.type) == (status, kind)
    if status == 500:
        assert info.message == "internal error; see server logs for request id req-1"
    if status == 503:
        assert info.headers == {"Retry-After": "2"}
    if status == 400:
        assert "\n" not in info.message and len(info.message) < 400
