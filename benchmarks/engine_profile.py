"""Where a burst's time goes inside vLLM: the engine alone, fed the reference workload.

The GPU bench (:mod:`benchmarks.gpu`) times whole serving stacks. This bench strips
them away: one in-process ``AsyncLLM`` (the model replica's engine, with the engine
arguments of ``--serve-config``) receives the reference workload's clips, already decoded
and patchified (``vision_input: patches``) or as frames for the HF processor
(``--input frames``), and runs bursts of ``--inflight`` clips:

* ``cold``: all at once, the first burst after the engine started (what the GPU bench's
  one burst measures);
* ``warm``: all at once again (fresh multimodal ids and caches reset, so nothing is reused);
* ``staggered``: the arrivals spread evenly over ``--stagger-s`` seconds, as the decode tier
  delivers a burst to the replica;
* ``profiled``: all at once under vLLM's torch profiler for ``--profile-iters`` engine steps
  after ``--profile-delay`` steps: the GPU kernels by self CUDA time and the GPU's busy
  fraction over that window (union of kernel intervals / wall time);
* ``sustained``: the closed loop of the graph's ``sustainN`` steps on the engine alone
  (:func:`benchmarks.window_load.closed_loop`): ``--inflight`` clips kept in flight for ``--sustain-s``
  seconds, a new one as each ends (the clips used again in turn, each time under a new id), the rate
  read after ``--sustain-warmup-s``, the first sends spread over ``--sustain-stagger-s``; no ramp or drain
  in the figure, and a sweep of ``--inflight`` tells where the engine saturates. ``--sustain-points``
  runs that sweep on one engine, point after point (``1x64,3x64,3x128``: questions × clips in flight).

``--questions N`` asks every clip the first N of :data:`benchmarks.workload.QUESTIONS`, as a
window's questions reach the replica's engine: one multimodal id and ``cache_salt`` shared by the
clip's questions only, the later ones submitted at the first one's first token (the replica's
prefill hold, ``serve_app/model/engines/prefill_gate.py``), so they read the clip from the prefix
cache. ``--sampling greedy`` drops the model card's recipe (temperature 0: no top-p, no penalty),
to tell the sampler's share of a decode step. ``--window-attention`` decodes a clip's questions with
per-window cascade attention (:mod:`serve_app.model.engines.vllm_window_attention`).
``--encoder-cache-tokens`` sizes vLLM's encoder cache
(:func:`serve_app.model.engines.vllm_startup.build_async_llm`); the later questions' prefill time
(``later_prefill_s``, scheduled to first token) tells whether they ran the vision tower again. With
``--profile-delay`` past the prefill (64 clips of 8,149 tokens at 16,384 batched tokens a step: ~35
steps), the profiled steps are decode steps of 64 × N sequences of ~8k context.

Per burst: clips/s and answers/s, TTFT p50/p95 (of the first questions), and from vLLM's per-request
engine-core timestamps the time from the first arrival until the last clip was scheduled / got its
first token, and the prefill rate (prompt tokens/s between those points; first questions). Usage
(GPU machine)::

    python -m benchmarks.engine_profile --out $OUT/engine_profile.json \\
        [--engine-args '{"max_num_batched_tokens": 32768}'] [--input frames] \\
        [--questions 3 --bursts profiled --profile-delay 80] [--sampling greedy]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import itertools
import json
import logging
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.gpu_probe import versions
from benchmarks.torch_trace import kernel_summary
from benchmarks.window_load import WindowOutcome, closed_loop
from benchmarks.workload import (
    BASE_ENGINE_ARGS,
    OUTPUT_TOKENS,
    QUESTION,
    QUESTIONS,
    SYSTEM_PROMPT,
    decode_frames,
    summary,
    window_files,
)

logger = logging.getLogger(__name__)


def _timeline(rows: list[dict[str, float]], prompt_tokens: int) -> dict[str, Any]:
    """Burst timeline (s from the first arrival) from engine-core timestamps (monotonic)."""
    t0 = min(r["queued"] for r in rows)
    last_sched = max(r["scheduled"] for r in rows) - t0
    last_first = max(r["first_token"] for r in rows) - t0
    last_done = max(r["last_token"] for r in rows) - t0
    return {
        "last_arrival_s": round(max(r["queued"] for r in rows) - t0, 3),
        "last_scheduled_s": round(last_sched, 3),
        "last_first_token_s": round(last_first, 3),
        "last_token_s": round(last_done, 3),
        "prefill_tokens_per_s": round(len(rows) * prompt_tokens / last_first, 1) if last_first else None,
        "decode_tail_s": round(last_done - last_first, 3),
        "queue_s": summary([r["scheduled"] - r["queued"] for r in rows]),
        "prefill_s": summary([r["first_token"] - r["scheduled"] for r in rows]),
        "decode_s": summary([r["last_token"] - r["first_token"] for r in rows]),
    }


@dataclasses.dataclass
class _Tally:
    """What one burst's requests report: first questions' TTFT (s), engine timestamps and prompt lengths."""

    ttft: list[float] = dataclasses.field(default_factory=list)
    rows: list[dict[str, float]] = dataclasses.field(default_factory=list)
    later_prefill_s: list[float] = dataclasses.field(default_factory=list)  # later questions: scheduled -> 1st token
    prompt_tokens: set[int] = dataclasses.field(default_factory=set)
    tokens: int = 0
    timed: int = 0  # requests that reported engine timestamps


async def _ask(llm: Any, prompt: dict[str, Any], sampling: Any, rid: str, tally: _Tally,
               started: asyncio.Event | None) -> int:
    """One engine request to its end; returns its output tokens. ``started`` is given for a clip's first
    question only: it is set at the first token, or when the request ends without one."""
    t_sent = time.perf_counter()
    first = None
    m: Any = None
    tokens = 0
    try:
        async for out in llm.generate(prompt, sampling, rid):
            if started is not None and out.prompt_token_ids is not None:
                tally.prompt_tokens.add(len(out.prompt_token_ids))
            if first is None and out.outputs[0].token_ids:
                first = time.perf_counter() - t_sent
                if started is not None:
                    started.set()
            tokens += len(out.outputs[0].token_ids)
            m = out.metrics
    finally:
        if started is not None:
            started.set()  # the later questions go even when the first ends without a token
    if m is not None and m.last_token_ts:
        tally.timed += 1
        if started is not None:
            tally.rows.append({"queued": m.queued_ts, "scheduled": m.scheduled_ts, "first_token": m.first_token_ts,
                               "last_token": m.last_token_ts})
        else:
            tally.later_prefill_s.append(m.first_token_ts - m.scheduled_ts)
    if started is not None:
        tally.ttft.append(first if first is not None else float("nan"))
    tally.tokens += tokens
    return tokens


async def _window(llm: Any, group: list[dict[str, Any]], sampling: Any, rid: str, tally: _Tally) -> int:
    """One clip's questions (its group of prompts, :func:`_prompts`): the first submitted now, the others once it
    has its first token or has ended without one (the replica's prefill hold). Returns the output tokens."""
    started = asyncio.Event()
    head = asyncio.create_task(_ask(llm, group[0], sampling, rid, tally, started))
    await started.wait()
    later = (_ask(llm, p, sampling, f"{rid}-q{q}", tally, None) for q, p in enumerate(group[1:], 2))
    return sum(await asyncio.gather(head, *later))


async def _burst(
    llm: Any, groups: list[list[dict[str, Any]]], sampling: Any, tag: str, stagger_s: float = 0.0
) -> dict[str, Any]:
    """Runs one burst of clips, each a group of engine prompts (its questions; see :func:`_prompts`).

    A group's first prompt is submitted at the group's arrival (``stagger_s`` spreads the arrivals
    evenly over that many seconds), the others once the first has its first token or has ended
    without one. TTFT and the engine timeline are the first prompts' (the timeline only when every
    request reported its timestamps and the first prompts share one prompt length).
    """
    t0 = time.perf_counter()
    tally = _Tally()
    n_requests = sum(len(g) for g in groups)

    async def one(i: int, group: list[dict[str, Any]]) -> None:
        if stagger_s:
            await asyncio.sleep(stagger_s * i / max(len(groups) - 1, 1))
        await _window(llm, group, sampling, f"{tag}-{i}", tally)

    await asyncio.gather(*(one(i, g) for i, g in enumerate(groups)))
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "clips": len(groups),
        "questions_per_clip": len(groups[0]) if groups else 0,
        "stagger_s": stagger_s,
        "wall_s": round(wall, 3),
        "clips_per_s": round(len(groups) / wall, 4),
        "answers_per_s": round(n_requests / wall, 4),
        "output_tokens_per_s": round(tally.tokens / wall, 1),
        "ttft_s": summary(tally.ttft),
        "prompt_tokens": sorted(tally.prompt_tokens),
    }
    out.update(_later(tally))
    if tally.timed == n_requests and len(tally.prompt_tokens) == 1:
        out["engine_timeline"] = _timeline(tally.rows, next(iter(tally.prompt_tokens)))
    logger.info("%s: %.2f clips/s (%.1f s)", tag, out["clips_per_s"], wall)
    return out


def _later(tally: _Tally) -> dict[str, Any]:
    """``later_prefill_s``: the later questions' prefill (scheduled to first token; read from the prefix cache:
    tens of ms, more when vLLM runs the vision tower again for the video's last block), if there were any."""
    return {"later_prefill_s": summary(tally.later_prefill_s)} if tally.later_prefill_s else {}


async def _sustained(llm: Any, clips: list[Any], make_groups: Any, n_questions: int, sampling: Any,
                     args: argparse.Namespace, inflight: int, tag: str = "sustained") -> dict[str, Any]:
    """The closed loop of :func:`benchmarks.window_load.closed_loop` on the engine: ``inflight`` clips in
    flight for ``args.sustain_s`` s, the rate read after ``args.sustain_warmup_s`` s, the first sends spread over
    ``args.sustain_stagger_s`` s. The clips are used again in turn, each time as a new clip (``make_groups`` gives
    it a fresh multimodal id and cache salt), so nothing is served from a cache but a window's own questions.
    Request ids are ``{tag}-{i}`` (``-q2``, ``-q3`` for the later questions)."""
    tally = _Tally()
    items = ((i, make_groups([clips[i % len(clips)]])[0]) for i in itertools.count())

    async def ask(item: tuple[int, list[dict[str, Any]]], t0: float) -> WindowOutcome:
        sent_s = time.perf_counter() - t0
        tokens = await _window(llm, item[1], sampling, f"{tag}-{item[0]}", tally)
        return WindowOutcome(200, tokens, sent_s, time.perf_counter() - t0)

    res = await closed_loop(ask, items, n_questions, inflight, args.sustain_s, args.sustain_warmup_s,
                            args.sustain_stagger_s)
    logger.info("%s: %.3f windows/s (%.3f by latency)", tag, res["windows_per_s"], res["windows_per_s_by_latency"])
    return {**res, "clips_per_s": res["windows_per_s_by_latency"], "ttft_s": summary(tally.ttft), **_later(tally)}


def sustain_points(text: str) -> list[tuple[int, int]]:
    """``--sustain-points``: ``QxN[,QxN...]``, questions per window × windows in flight, e.g. ``1x64,3x128``.

    Raises:
        argparse.ArgumentTypeError: a point is not ``QxN`` with 1 <= Q <= len(QUESTIONS) and N >= 1.
    """
    points = []
    for part in text.split(","):
        q, _, n = part.strip().partition("x")
        if not (q.isdigit() and n.isdigit() and 1 <= int(q) <= len(QUESTIONS) and int(n) >= 1):
            raise argparse.ArgumentTypeError(
                f"a sustained point is QxN (questions 1-{len(QUESTIONS)} x windows in flight >= 1), got {part!r}")
        points.append((int(q), int(n)))
    return points


async def _sustained_points(llm: Any, clips: list[Any], make_groups_for: Any, sampling: Any,
                            args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The closed loop at each of ``args.sustain_points`` on one engine, back to back: a point starts when the one
    before it stops sending, so the earlier point's last windows end during the next one's uncounted warm-up
    (which must outlast a window's latency) and no engine start or drain is paid between points.
    ``make_groups_for(q)`` is the ``make_groups`` of ``q`` questions. Returns the points' results by name,
    ``sustained_q{Q}x{N}``; from the second on with ``previous_drain_s`` and ``previous_drain_counted``: the
    earlier point's windows still ran into this one's counted interval (its drain outlasted the warm-up; H200,
    2026-12-04: 128 windows of 3 questions took 81 s to drain), and this point's rate is not its own."""
    runs = []
    for q, n in args.sustain_points:
        tag = f"sustained_q{q}x{n}"
        runs.append((tag, asyncio.create_task(_sustained(llm, clips, make_groups_for(q), q, sampling, args, n, tag))))
        await asyncio.sleep(args.sustain_s)  # this point's sending time, then the next point
    out = {tag: await task for tag, task in runs}
    for (before, _), (tag, _) in itertools.pairwise(runs):
        drain_s = out[before]["drain_s"]
        out[tag] = {**out[tag], "previous_drain_s": drain_s, "previous_drain_counted": drain_s > args.sustain_warmup_s}
    return out


def _prompts(
    clips: list[Any], mode: str, extra_processor_kwargs: dict[str, Any], questions: tuple[str, ...] = (QUESTION,)
) -> list[list[dict[str, Any]]]:
    """Engine prompts for the clips: per clip, one per question, sharing a fresh multimodal id.

    The id is the clip's multimodal UUID and the ``cache_salt`` of its prefix-cache blocks, as the
    replica sends them (:func:`serve_app.model.engines.vllm_inputs.engine_prompt`): a clip's questions
    can share its blocks; no other clip, burst or run can. ``clips``: per clip, the patches
    (``mode == "patches"``) or the ``(T, H, W, 3) uint8`` frames at 4 fps (``"frames"``).
    """
    from serve_app.decode.vision_patches import video_input
    from serve_app.model.family import family_for
    from serve_app.model.prompt import render_prompt

    texts = [render_prompt(q, SYSTEM_PROMPT) for q in questions]
    out = []
    for c in clips:
        uid = uuid.uuid4().hex
        ident = {"multi_modal_uuids": {"video": [uid]}, "cache_salt": uid}
        if mode == "patches":
            data: dict[str, Any] = {"multi_modal_data": {"video": video_input(c)}}
        else:
            data = {"multi_modal_data": {"video": c},
                    "mm_processor_kwargs": family_for("qwen2_5_vl").vllm_video(c, 4.0, extra_processor_kwargs)[1]}
        out.append([{"prompt": t, **data, **ident} for t in texts])
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Starts the engine, runs the bursts, returns the result (see the module docstring)."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from serve_app.config import app_config_from_file
    from serve_app.decode.vision_patches import patchify
    from serve_app.model.engines import engine_watch
    from serve_app.model.engines.vllm_patches import accept_processed_video
    from serve_app.model.engines.vllm_startup import build_async_llm
    from serve_app.model_facts import COSMOS_REPETITION_PENALTY, COSMOS_TEMPERATURE, COSMOS_TOP_P

    files = window_files(args)
    decoded = [decode_frames(f) for f in files[: 1 + args.inflight]]
    clips: list[Any] = [patchify(fr, 4.0) for fr in decoded] if args.input == "patches" else decoded
    model_cfg = app_config_from_file(args.serve_config).model
    engine_args = {**model_cfg.engine_args, **BASE_ENGINE_ARGS, **json.loads(args.engine_args)}
    if args.window_attention:
        engine_args["disable_cascade_attn"] = False  # vLLM 0.24 skips the runner's cascade step (the plan's hook) else
    if args.input == "patches":
        accept_processed_video()
        engine_args.setdefault("enable_mm_embeds", True)
    profile_dir = Path(args.out).with_suffix(".trace")
    shutil.rmtree(profile_dir, ignore_errors=True)  # kernel_summary must read this run's trace, not an earlier one
    if args.profile_iters:
        engine_args["profiler_config"] = {
            "profiler": "torch", "torch_profiler_dir": str(profile_dir.resolve()),
            "torch_profiler_with_stack": False, "ignore_frontend": True,
            "delay_iterations": args.profile_delay, "max_iterations": args.profile_iters,
        }
    kwargs = dict(engine_args)
    if "profiler_config" in kwargs:  # vLLM converts a dict for compilation_config, not for this one
        from vllm.config import ProfilerConfig

        kwargs["profiler_config"] = ProfilerConfig(**kwargs["profiler_config"])
    engine_watch.install(window_attention=args.window_attention)
    t0 = time.perf_counter()
    llm = build_async_llm(AsyncEngineArgs(model=args.checkpoint, disable_log_stats=False, **kwargs), AsyncLLM,
                          args.encoder_cache_tokens, UsageContext.ENGINE_CONTEXT)
    start_s = time.perf_counter() - t0
    recipe = {"temperature": 0.0} if args.sampling == "greedy" else {
        "temperature": COSMOS_TEMPERATURE, "top_p": COSMOS_TOP_P, "repetition_penalty": COSMOS_REPETITION_PENALTY}
    sampling = SamplingParams(max_tokens=OUTPUT_TOKENS, ignore_eos=True, output_kind=RequestOutputKind.DELTA,
                              **recipe)
    questions = QUESTIONS[: args.questions] if args.questions > 1 else (QUESTION,)
    extra = dict(model_cfg.processor_kwargs)
    bursts: dict[str, Any] = {}
    await _burst(llm, _prompts(clips[:1], args.input, extra), sampling, "warmup")
    make_groups = functools.partial(_prompts, mode=args.input, extra_processor_kwargs=extra, questions=questions)
    for name in args.bursts:
        await llm.reset_prefix_cache()
        await llm.reset_mm_cache()
        if name == "sustained" and args.sustain_points:
            bursts.update(await _sustained_points(llm, clips[1:], lambda q: functools.partial(
                make_groups, questions=QUESTIONS[:q] if q > 1 else (QUESTION,)), sampling, args))
        elif name == "sustained":
            bursts[name] = await _sustained(llm, clips[1:], make_groups, len(questions), sampling, args, args.inflight)
        elif name == "profiled":
            await llm.start_profile()
            bursts[name] = await _burst(llm, make_groups(clips[1:]), sampling, name)
            await llm.stop_profile()
        else:
            stagger_s = args.stagger_s if name == "staggered" else 0.0
            bursts[name] = await _burst(llm, make_groups(clips[1:]), sampling, name, stagger_s)
    llm.shutdown()
    result: dict[str, Any] = {
        "command": "python -m benchmarks.engine_profile " + " ".join(args.argv),
        "versions": versions(),
        "input": args.input,
        "engine_args": engine_args,
        "encoder_cache_tokens": args.encoder_cache_tokens,
        "window_attention": args.window_attention,
        "processor_kwargs": extra if args.input == "frames" else None,
        "questions": list(questions),
        "sampling": recipe,
        "engine_start_s": round(start_s, 1),
        "bursts": bursts,
    }
    traces = sorted(profile_dir.glob("*.pt.trace.json*")) if profile_dir.exists() else []
    if traces:
        result["profile"] = {"iterations": args.profile_iters, "after_iterations": args.profile_delay,
                             **kernel_summary(traces[-1])}
    return result


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description="the vLLM engine alone under bursts of the reference workload")
    p.add_argument("--checkpoint", default="checkpoints/cosmos-reason1-7b-dummy")
    p.add_argument("--clip", default="tests/data/intel_car-detection.mp4")
    p.add_argument("--serve-config", default="configs/h200.yaml", help="engine arguments and processor kwargs")
    p.add_argument("--engine-args", default="{}", help="JSON overrides of the engine arguments")
    p.add_argument("--input", choices=("patches", "frames"), default="patches")
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--bursts", nargs="+", default=["cold", "warm", "staggered", "profiled"],
                   choices=("cold", "warm", "staggered", "profiled", "sustained"))
    p.add_argument("--sustain-s", type=float, default=110.0, help="the sustained loop's sending time (s)")
    p.add_argument("--sustain-warmup-s", type=float, default=45.0, help="the sustained loop's uncounted start (s)")
    p.add_argument("--sustain-stagger-s", type=float, default=30.0, help="the sustained loop's first sends' spread (s)")
    p.add_argument("--sustain-points", type=sustain_points, default=None, metavar="QxN[,QxN...]",
                   help="the sustained loop at each point (questions x windows in flight) in turn on one engine, "
                        "instead of --questions x --inflight (the clips: the first --inflight of the windows)")
    p.add_argument("--stagger-s", type=float, default=9.0, help="arrival spread of the staggered burst (s)")
    p.add_argument("--profile-delay", type=int, default=20, help="engine steps before profiling starts")
    p.add_argument("--profile-iters", type=int, default=20, help="engine steps profiled (0: no profiler)")
    p.add_argument("--questions", type=int, default=1, choices=range(1, len(QUESTIONS) + 1), metavar="N",
                   help=f"questions per clip (1-{len(QUESTIONS)}): the later ones at the first one's first token")
    p.add_argument("--sampling", choices=("recipe", "greedy"), default="recipe",
                   help="the model card's recipe (temperature 0.6, top_p 0.95, repetition_penalty 1.05) or greedy")
    p.add_argument("--encoder-cache-tokens", type=int, default=None,
                   help="vLLM's encoder cache size in multimodal tokens (default: vLLM's, max_num_batched_tokens)")
    p.add_argument("--window-attention", action="store_true",
                   help="per-window cascade attention (the config's model.window_cascade_attention)")
    p.add_argument("--windows-dir", default="/tmp/bench-windows")
    p.add_argument("--out", default="results/gpu/engine_profile.json")
    args = p.parse_args(argv)
    if "profiled" in args.bursts and args.profile_iters < 1:  # else the profiled burst runs without a profiler
        p.error("the profiled burst needs --profile-iters >= 1 (or leave it out of --bursts)")
    if args.inflight < 1 or args.profile_delay < 0:
        p.error("--inflight must be >= 1 and --profile-delay >= 0")
    if "sustained" in args.bursts and not 0 <= args.sustain_warmup_s < args.sustain_s:
        p.error("the sustained loop needs 0 <= --sustain-warmup-s < --sustain-s (no rate is read otherwise)")
    args.argv = list(argv if argv is not None else sys.argv[1:])
    args.single, args.window_count = 0, None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    result = asyncio.run(run(args))
    Path(args.out).write_text(json.dumps(result, indent=2))
    timeline_keys = ("last_scheduled_s", "last_first_token_s", "prefill_tokens_per_s", "decode_tail_s")
    print(json.dumps({k: {"clips_per_s": v["clips_per_s"], "answers_per_s": v["answers_per_s"],
                          **{x: v.get("engine_timeline", {}).get(x) for x in timeline_keys}}
                      for k, v in result["bursts"].items()}, indent=1))
    if "profile" in result:
        prof = result["profile"]
        print("profile:", {k: prof.get(k) for k in ("window_ms", "busy_ms", "busy_fraction", "kinds_ms")})
        for k in prof["kernels"][:12]:
            print(f"  {k['ms']:9.1f} ms {k['calls']:6d}  {k['name']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
