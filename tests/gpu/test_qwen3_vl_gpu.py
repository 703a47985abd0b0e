"""The Qwen3-VL family (Cosmos-Reason2-8B's architecture, dummy weights) through vLLM on the GPU machine.

* vLLM's own input processing (tokenizer + its Qwen3-VL multimodal processor; no model loaded) of a clip as
  the replica hands it over (:meth:`serve_app.model.family.ModelFamily.vllm_video`) against transformers'
  processor on the same checkpoint: the same grid, pixel values and video placeholders.
* The graph with ``configs/h200-reason2.yaml`` answering a 10-s window at 4 fps.

Skipped without vLLM (as on the CPU CI); run with ``bash benchmarks/gpu_machine.sh tests``.
"""

import importlib.util
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DUMMY = ROOT / "checkpoints" / "cosmos-reason2-8b-dummy"
NO_VLLM = importlib.util.find_spec("vllm") is None
pytestmark = pytest.mark.skipif(NO_VLLM, reason="vLLM is not installed")

QUESTION = "Is anyone in this scene in danger?"
SYSTEM = "You are a helpful assistant."
#: A 10-s 16:9 window at 4 fps under Cosmos-Reason2's budget (tests/unit/decode: the decode tier's size).
SHAPE = (40, 320, 608)


@pytest.fixture(scope="module")
def dummy() -> Path:
    from serve_app.model.checkpoint import ensure_checkpoint

    return ensure_checkpoint("full-dummy", DUMMY, "qwen3_vl")


@pytest.fixture(scope="module")
def input_processor(dummy):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor

    args = EngineArgs(model=str(dummy), load_format="dummy", max_model_len=16384)
    return InputProcessor(args.create_engine_config())


def test_vllm_takes_the_clip_as_the_hf_processor_makes_it(input_processor, dummy):
    import torch
    from transformers import AutoProcessor
    from transformers.video_utils import VideoMetadata
    from vllm.sampling_params import SamplingParams

    from serve_app.model.engines.base import GenerationRequest
    from serve_app.model.engines.vllm_inputs import engine_prompt
    from serve_app.model.family import family_for
    from serve_app.model_facts_qwen3_vl import VIDEO_TOKEN_ID, VISION_END_TOKEN_ID, VISION_START_TOKEN_ID
    from serve_app.protocol import SamplingOptions

    family = family_for("qwen3_vl")
    frames = np.random.default_rng(0).integers(0, 256, (*SHAPE, 3), dtype=np.uint8)
    prompt = family.render_prompt(QUESTION, SYSTEM)
    sampling = SamplingOptions(max_tokens=8, temperature=0.0, top_p=1.0, repetition_penalty=1.0)
    request = GenerationRequest("r-qwen3", frames, 4.0, prompt, sampling)
    out = input_processor.process_inputs(
        request.request_id, engine_prompt(request, None, None, "qwen3_vl"), SamplingParams(max_tokens=8),
        supported_tasks=("generate",), arrival_time=time.time(),
    )
    hf = AutoProcessor.from_pretrained(dummy)(
        text=[prompt], videos=[frames], video_metadata=[VideoMetadata(**family.video_metadata(frames, 4.0))],
        return_tensors="pt", **family.processor_kwargs(frames, 4.0),
    )
    feature = out.mm_features[0]
    assert feature.data["video_grid_thw"].data.tolist() == hf["video_grid_thw"][0].tolist() == [20, 20, 38]
    pv = feature.data["pixel_values_videos"].data
    # vLLM casts the processor's float32 pixels to the model's dtype (bf16): compare in that dtype
    assert pv.dtype == torch.bfloat16
    assert torch.equal(pv.cpu(), hf["pixel_values_videos"].to(pv.dtype))
    ids = list(out.prompt_token_ids)
    assert ids.count(VIDEO_TOKEN_ID) == 20 * 10 * 19 == hf["input_ids"][0].tolist().count(VIDEO_TOKEN_ID)
    hf_ids = hf["input_ids"][0].tolist()
    if len(hf_ids) == len(ids) + 2:
        # transformers 5.x replaces only <|video_pad|>, keeping the template's outer vision start/end around the
        # frame groups; vLLM replaces the whole <|vision_start|><|video_pad|><|vision_end|>
        first, last = hf_ids.index(VISION_START_TOKEN_ID), len(hf_ids) - 1 - hf_ids[::-1].index(VISION_END_TOKEN_ID)
        hf_ids = hf_ids[:first] + hf_ids[first + 1 : last] + hf_ids[last + 1 :]
    assert ids == hf_ids
    text = input_processor.tokenizer.decode(ids) if hasattr(input_processor, "tokenizer") else ""
    assert not text or ("<0.1 seconds>" in text and "<9.6 seconds>" in text)


@pytest.fixture(scope="module")
def reason2_app(dummy):
    """``configs/h200-reason2.yaml`` on the dummy checkpoint (one warm-up clip, no decode sweep)."""
    from gpuapp import gpu_graph

    with gpu_graph("h200-reason2.yaml", dummy, "cosmos-reason2-8b-dummy", "reason2", warmup_clips=1,
                   warmup_decode_sweep=0) as url:
        yield url


def test_the_graph_answers_a_reference_window_with_the_qwen3_architecture(reason2_app):
    r = httpx.post(f"{reason2_app}/v1/video/query", json={
        "question": QUESTION, "video_path": "intel_car-detection.mp4", "start_s": 10, "end_s": 20,
        "max_tokens": 16, "ignore_eos": True}, timeout=300)  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "cosmos-reason2-8b-dummy" and body["random_weights"] is True
    v = body["video"]
    assert (v["num_frames"], v["frame_height"], v["frame_width"]) == SHAPE
    assert body["usage"]["video_tokens"] == 3800 and body["usage"]["prompt_tokens"] > 3800 + 20 * 4
    assert body["usage"]["completion_tokens"] == 16 and body["finish_reason"] == "length"
