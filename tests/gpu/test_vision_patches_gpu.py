"""Clips as patches through vLLM's own input processing, against frames through its HF processor.

Needs vLLM (skipped without it, as on the CPU CI); no model is loaded: only vLLM's ``InputProcessor``
(tokenizer + multimodal processor) runs, and the table patchify of ``model.patchify: table`` on the GPU.
Run on the GPU machine with ``bash benchmarks/gpu_machine.sh tests``.
"""

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DUMMY = ROOT / "checkpoints" / "cosmos-reason1-7b-dummy"

NO_VLLM = importlib.util.find_spec("vllm") is None
pytestmark = pytest.mark.skipif(NO_VLLM, reason="vLLM is not installed")


@pytest.fixture(scope="module")
def input_processor():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor

    from serve_app.model.checkpoint import ensure_checkpoint
    from serve_app.model.engines.vllm_patches import accept_processed_video

    ensure_checkpoint("full-dummy", DUMMY)
    args = EngineArgs(model=str(DUMMY), load_format="dummy", enable_mm_embeds=True, max_model_len=16384)
    accept_processed_video()
    return InputProcessor(args.create_engine_config())


def _process(input_processor, request, table_device=None):
    from vllm.sampling_params import SamplingParams

    from serve_app.model.engines.vllm_inputs import engine_prompt

    prompt = engine_prompt(request, None, table_device)
    params = SamplingParams(max_tokens=8)
    return input_processor.process_inputs(
        request.request_id, prompt, params, supported_tasks=("generate",), arrival_time=time.time()
    )


def test_patches_reach_the_engine_as_the_hf_processor_would_make_them(input_processor):
    import torch

    from serve_app.decode.vision_patches import patchify
    from serve_app.model.engines.base import GenerationRequest
    from serve_app.model.prompt import render_prompt
    from serve_app.protocol import SamplingOptions

    frames = np.random.default_rng(0).integers(0, 256, (40, 420, 756, 3), dtype=np.uint8)
    sampling = SamplingOptions(max_tokens=8, temperature=0.0, top_p=1.0, repetition_penalty=1.0)
    prompt = render_prompt("Is anyone in this scene in danger? Answer with reasoning.", "You are a helpful assistant.")
    by_frames = _process(input_processor, GenerationRequest("r-frames", frames, 4.0, prompt, sampling))
    by_patches = _process(
        input_processor, GenerationRequest("r-patches", None, 4.0, prompt, sampling, patches=patchify(frames, 4.0))
    )
    assert len(by_patches.prompt_token_ids) == 8133
    assert by_patches.prompt_token_ids == by_frames.prompt_token_ids
    a, b = by_frames.mm_features[0], by_patches.mm_features[0]
    assert a.mm_position == b.mm_position
    fields = ["pixel_values_videos", "second_per_grid_ts", "video_grid_thw"]
    assert sorted(a.data.keys()) == sorted(b.data.keys()) == fields
    pa, pb = a.data["pixel_values_videos"].data, b.data["pixel_values_videos"].data
    assert pb.dtype == torch.bfloat16 and torch.equal(pa.to(torch.bfloat16).cpu(), pb)
    assert a.data["video_grid_thw"].data.tolist() == b.data["video_grid_thw"].data.tolist() == [20, 30, 54]
    assert float(a.data["second_per_grid_ts"].data) == float(b.data["second_per_grid_ts"].data) == 0.5


@pytest.mark.skipif(NO_VLLM or not importlib.util.find_spec("torch"), reason="needs vLLM and torch")
def test_frames_patchified_with_the_table_on_the_gpu_reach_the_engine_as_the_hf_processor_would_make_them(
    input_processor,
):
    """model.patchify 'table' with processor_kwargs {device: cuda}, as configs/h200.yaml runs it."""
    import torch

    from serve_app.model.engines.base import GenerationRequest
    from serve_app.model.prompt import render_prompt
    from serve_app.protocol import SamplingOptions

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    frames = np.random.default_rng(1).integers(0, 256, (40, 420, 756, 3), dtype=np.uint8)
    frames.setflags(write=False)
    sampling = SamplingOptions(max_tokens=8, temperature=0.0, top_p=1.0, repetition_penalty=1.0)
    prompt = render_prompt("What happens next?", "You are a helpful assistant.")
    by_frames = _process(input_processor, GenerationRequest("r-frames2", frames, 4.0, prompt, sampling))
    by_table = _process(input_processor, GenerationRequest("r-table", frames, 4.0, prompt, sampling), "cuda")
    assert by_table.prompt_token_ids == by_frames.prompt_token_ids
    a, b = by_frames.mm_features[0], by_table.mm_features[0]
    assert a.mm_position == b.mm_position
    assert sorted(a.data.keys()) == sorted(b.data.keys())
    pa, pb = a.data["pixel_values_videos"].data, b.data["pixel_values_videos"].data
    assert pb.dtype == torch.bfloat16 and pb.device.type == "cpu"
    assert torch.equal(pa.to(torch.bfloat16).cpu(), pb)
    assert a.data["video_grid_thw"].data.tolist() == b.data["video_grid_thw"].data.tolist() == [20, 30, 54]
