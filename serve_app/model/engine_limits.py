"""What the engine accepts: the context budget of a clip, and engine errors as client errors (pure).

* :func:`check_context`: a clip whose video tokens (with the prompt's text) do not
  fit the engine's context (``model.max_model_len`` / vLLM's ``max_model_len``) is a
  400 naming ``max_frames`` and the limit, before it reaches the engine.
* :func:`engine_error`: an exception from an engine's ``generate`` as the value the
  client sees: the request's fault (``ValueError``/``TypeError``: vLLM's input
  validation, e.g. a prompt longer than ``max_model_len``) → 400; an engine fault
  (:class:`serve_app.model.engines.base.EngineDeadError`) → 503 with ``Retry-After``;
  anything else → 500 carrying the request id only.
"""

from __future__ import annotations

from serve_app.decode.sampling import video_tokens
from serve_app.errors import ErrorInfo, InvalidRequestError, OverloadedError, internal_error
from serve_app.log_limit import get_logger
from serve_app.model.engines.base import EngineDeadError
from serve_app.text import log_safe

logger = get_logger(__name__)

#: Tokens of the chat template around the text (role tags, newlines, the video's start/end
#: tokens): ``<|im_start|>system\n…<|im_end|>\n<|im_start|>user\n<|vision_start|>…`` ≈ 20; rounded up.
TEMPLATE_TOKENS = 32
#: UTF-8 bytes per text token assumed for the prompt's text (Qwen2's byte-level BPE averages
#: about 4 bytes per token on English text); the engine's own check catches the rest (400).
BYTES_PER_TEXT_TOKEN = 4


def text_tokens_estimate(*texts: str) -> int:
    """Estimated prompt tokens of ``texts`` plus the template (:data:`TEMPLATE_TOKENS`)."""
    n_bytes = sum(len(t.encode("utf-8", "replace")) for t in texts)
    return TEMPLATE_TOKENS + -(-n_bytes // BYTES_PER_TEXT_TOKEN)


def check_context(
    n_frames: int,
    height: int,
    width: int,
    text_tokens: int,
    max_model_len: int | None,
    pixel_factor: int = 28,
    tokens_per_group: int = 0,
) -> int:
    """Checks that a clip's prompt fits the engine's context.

    Args:
        n_frames: frames sent to the model (T, even).
        height, width: frame size in pixels (multiples of ``pixel_factor``).
        text_tokens: tokens of the prompt's text (see :func:`text_tokens_estimate`).
        max_model_len: the engine's context in tokens (None: not checked).
        pixel_factor: the family's pixel factor (28 Qwen2.5-VL, 32 Qwen3-VL).
        tokens_per_group: text tokens the processor adds per frame pair (Qwen3-VL's timestamps).

    Returns:
        The clip's video tokens (``T/2 · H/f · W/f``; :func:`serve_app.decode.sampling.video_tokens`).

    Raises:
        InvalidRequestError (400, ``param="max_frames"``): video tokens + text tokens exceed
            ``max_model_len``; the message gives both numbers and the most frames that fit.
    """
    tokens = video_tokens(n_frames, height, width, pixel_factor)
    group_tokens = -(-n_frames // 2) * tokens_per_group
    if max_model_len is None or tokens + group_tokens + text_tokens <= max_model_len:
        return tokens
    per_pair = max(1, video_tokens(2, height, width, pixel_factor) + tokens_per_group)
    fits = max(0, (max_model_len - text_tokens) // per_pair) * 2
    raise InvalidRequestError(
        f"the clip's {n_frames} frames of {width}x{height} are {tokens} video tokens; with the prompt "
        f"(~{text_tokens + group_tokens} tokens) that exceeds the model's context of {max_model_len} tokens "
        f"(model.max_model_len): ask for at most {fits} frames (max_frames), a lower fps or a shorter window",
        param="max_frames",
    )


def engine_error(exc: BaseException, request_id: str, retry_after_s: int = 1) -> ErrorInfo:
    """The client-visible error for an exception raised by an engine while generating.

    ``ValueError``/``TypeError`` are the request's fault, as vLLM's own OpenAI server treats
    them (400, first line of the message, at most 300 characters); :class:`EngineDeadError` is
    the engine's (503, ``Retry-After``); anything else is a bug (500 with the request id only).
    """
    if isinstance(exc, EngineDeadError):
        logger.error("request %s: engine dead: %s", log_safe(request_id), exc)
        return OverloadedError("the model replica is restarting; retry", retry_after_s=retry_after_s).info()
    if isinstance(exc, (ValueError, TypeError)):
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        logger.info("request %s: the engine refused the request: %s", log_safe(request_id), log_safe(first))
        return InvalidRequestError(f"the model cannot take this request: {first}").info()
    logger.error("request %s: engine failure", log_safe(request_id), exc_info=exc)
    return internal_error(request_id)
