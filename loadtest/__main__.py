"""``python -m loadtest``: N real-time camera feeds against a running app, and whether it keeps up.

Examples::

    # four surveillance cameras, 10-s windows, for 2 minutes, against a local app
    python -m loadtest --cameras 4 --duration-s 120 --config configs/cpu.yaml

    # how many cameras keep up (p95 freshness ≤ window, < 1% errors)?
    python -m loadtest --sweep 1,2,4,8,16 --duration-s 120

    # the client-capacity check: 64 cameras against the built-in fast test double
    python -m loadtest --target double --cameras 64 --duration-s 120

    # live cameras registered on the service, measured from its events (loadtest/streams.py)
    python -m loadtest --streams --cameras 4 --window-s 2 --fps 2 --duration-s 120

    # re-render tables and plots of a saved run or sweep
    python -m loadtest --report runs/loadtest/20250101-120000/results.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import platform
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live

from loadtest import plots
from loadtest.client import make_client
from loadtest.report import (
    LiveView,
    build_results,
    load_results,
    records_of,
    render_run,
    sweep_table,
    write_run,
)
from loadtest.runner import Feed, Runner, prepare_feeds
from loadtest.schedule import SCHEDULES, STAGGERS
from loadtest.settings import (
    DEFAULT_QUESTIONS,
    RunSettings,
    ServerLimitError,
    check_against_server,
    load_cameras_file,
    make_cameras,
)
from loadtest.sweep import parse_levels, run_sweep

if TYPE_CHECKING:
    from serve_app.config import AppConfig

logger = logging.getLogger("loadtest")
console = Console(stderr=True)


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: …)`` only where the help text does not already say it and there is a default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action) or ""


def parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    p = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__.split("\n")[0],
                                formatter_class=_DefaultsFormatter)
    g = p.add_argument_group("target")
    g.add_argument("--target", default="http://127.0.0.1:8000",
                   help="base URL of the app, or 'double' to start the built-in fast test double")
    g.add_argument("--config", help="the server's Serve config (YAML): limits and allow_ignore_eos are checked")
    g.add_argument("--api", choices=("native", "openai"), default="native",
                   help="native: POST /v1/video/query of this service; openai: POST /v1/chat/completions of any "
                   "OpenAI-compatible server (plain vllm serve), each window's cut bytes as a video_url data URL")
    g.add_argument("--model", help="--api openai: the model name sent (default: the first of GET /v1/models)")
    g.add_argument("--api-key-env", help="environment variable holding the API key, sent as 'Authorization: "
                   "Bearer' (default: the config's api_key_env, else COSMOS_SERVE_API_KEY; unset: no key)")
    g.add_argument("--double-service-ms", type=float, default=50.0, help="--target double: time per request (ms)")
    g.add_argument("--double-token-ms", type=float, default=0.0, help="--target double: gap between tokens (ms)")
    g.add_argument("--double-concurrency", type=int, default=0, help="--target double: requests served at once")
    g = p.add_argument_group("cameras")
    g.add_argument("--cameras", type=int, default=4, help="number of camera feeds")
    g.add_argument("--source", "--clip", dest="source", action="append",
                   help="clip (looped) or rtsp/http URL; repeat to mix "
                   "(cameras take them round-robin; default: tests/data/intel_car-detection.mp4)")
    g.add_argument("--cameras-file", help="YAML list of cameras (id, source, window_s, fps, max_frames, "
                   "questions, duration_s); missing keys come from the flags")
    g.add_argument("--window-s", type=float, default=10.0, help="window length (s): one request per window")
    g.add_argument("--fps", type=float, help="sampling rate sent to the server (default: the server's)")
    g.add_argument("--max-frames", type=int, help="frame cap sent to the server (default: the server's)")
    g.add_argument("--question", action="append", help="question (repeat for a set, asked round-robin)")
    g.add_argument("--questions-file", help="file with one question per line")
    g.add_argument("--all-questions", action="store_true",
                   help="ask every question about every window (one request each, sent together), not round-robin")
    g.add_argument("--transport", choices=("upload", "path"), default="upload",
                   help="upload window clips, or send video_path + start_s/end_s (server-local files)")
    g = p.add_argument_group("schedule")
    g.add_argument("--schedule", choices=SCHEDULES, default="realtime")
    g.add_argument("--interval-s", type=float, help="interval/poisson: period / mean gap (default: window); "
                   "closed: a worker's minimum gap between sends (default: none)")
    g.add_argument("--concurrency", type=int, help="closed: requests in flight (default: cameras)")
    g.add_argument("--stagger", choices=STAGGERS, default="uniform",
                   help="how camera phases spread over one window")
    g.add_argument("--seed", type=int, default=0, help="seed of random phases and Poisson gaps")
    g.add_argument("--duration-s", type=float, default=60.0, help="nothing is scheduled after this")
    g.add_argument("--warmup-s", type=float, default=0.0, help="requests scheduled earlier are not measured")
    g.add_argument("--max-requests", type=int, default=10_000, help="cap on requests sent")
    g.add_argument("--request-timeout-s", type=float, default=120.0, help="client timeout per request")
    g.add_argument("--drain-s", type=float, help="wait for answers after the last send (default: 2 × SLO)")
    g.add_argument("--max-connections", type=int, help="HTTP pool size (default: unlimited)")
    g = p.add_argument_group("requests")
    g.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True, help="stream (TTFT)")
    g.add_argument("--max-tokens", type=int, default=64, help="output budget per request (tokens)")
    g.add_argument("--temperature", type=float)
    g.add_argument("--request-seed", type=int, help="sampling seed sent with requests")
    g.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=None,
                   help="benchmark-only fixed output length (default: on if --config allows it)")
    g.add_argument("--extra-body", type=json.loads, metavar="JSON",
                   help="--api openai: a JSON object merged into every request body, as vllm bench serve's "
                        "--extra-body (plain vLLM: '{\"mm_processor_kwargs\":{\"device\":\"cuda\"}}')")
    g = p.add_argument_group("verdict and sweep")
    g.add_argument("--slo-s", type=float, help="p95 freshness objective (default: the window length)")
    g.add_argument("--max-error-rate", type=float, default=0.01)
    g.add_argument("--max-lag-growth", type=float, default=0.05, help="seconds of lag per second")
    g.add_argument("--sweep", help="camera counts to try, e.g. 1,2,4,8,16")
    g.add_argument("--sweep-search", action="store_true", help="then bisect between best pass and first failure")
    g.add_argument("--sweep-pause-s", type=float, default=5.0, help="idle time between sweep levels")
    g = p.add_argument_group("output")
    g.add_argument("--out", help="output folder (default: runs/loadtest/<time>)")
    g.add_argument("--report", help="re-render a saved results.json (run or sweep) and exit")
    g.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True, help="write PNG plots")
    g.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                   help="live progress view (default: when stderr is a terminal)")
    g.add_argument("--title", default="", help="title on plots")
    g.add_argument("-v", "--verbose", action="store_true")
    return p


def settings_for(a: argparse.Namespace, n_cameras: int, app_config: AppConfig | None = None) -> RunSettings:
    """The run settings for ``n_cameras`` from parsed CLI args."""
    questions = list(a.question or [])
    if a.questions_file:
        questions += [q.strip() for q in Path(a.questions_file).read_text().splitlines() if q.strip()]
    questions = questions or list(DEFAULT_QUESTIONS)
    if a.cameras_file:
        defaults = {"window_s": a.window_s, "fps": a.fps, "max_frames": a.max_frames, "questions": questions}
        base = load_cameras_file(a.cameras_file, defaults)
        if a.sweep:  # n cameras cycling through the file's entries
            cams = [base[i % len(base)].model_copy(update={"id": f"{base[i % len(base)].id}-{i}"})
                    for i in range(n_cameras)]
        else:
            cams = base
    else:
        cams = make_cameras(n_cameras, a.source, window_s=a.window_s, fps=a.fps, max_frames=a.max_frames,
                            questions=questions)
    ignore_eos = a.ignore_eos
    if ignore_eos is None:
        ignore_eos = bool(app_config is not None and app_config.model.allow_ignore_eos)
    return RunSettings(
        target=a.target, api=a.api, model=a.model, all_questions=a.all_questions, cameras=cams,
        schedule=a.schedule, interval_s=a.interval_s, concurrency=a.concurrency,
        stagger=a.stagger, seed=a.seed, duration_s=a.duration_s, warmup_s=a.warmup_s, max_requests=a.max_requests,
        request_timeout_s=a.request_timeout_s, drain_s=a.drain_s, transport=a.transport, stream=a.stream,
        max_tokens=a.max_tokens, temperature=a.temperature, request_seed=a.request_seed, ignore_eos=ignore_eos,
        extra_body=a.extra_body, slo_s=a.slo_s, max_error_rate=a.max_error_rate, max_lag_growth=a.max_lag_growth,
        max_connections=a.max_connections,
    )


def windows_info(feeds: list[Feed]) -> dict[str, Any]:
    """How each source was cut: window count, method counts, mean bytes per window."""
    out: dict[str, Any] = {}
    for f in feeds:
        if f.spec.source in out or f.windows is None:
            continue
        ws = f.windows
        out[f.spec.source] = {
            "window_s": f.spec.window_s, "windows": len(ws), "methods": dict(Counter(w.method for w in ws)),
            "mean_bytes": sum(w.size_bytes for w in ws) / len(ws),
        }
    return out


async def run_once(settings: RunSettings, out_dir: Path, *, live: bool, make_plots: bool, title: str = "",
                   extra: dict[str, Any] | None = None, api_key: str | None = None) -> dict[str, Any]:
    """One run: cut windows, drive the feeds, write results/CSV/plots; returns the results document."""
    feeds = prepare_feeds(settings)
    load_before = os.getloadavg()
    runner = Runner(settings, feeds, client_factory=lambda s: make_client(s, api_key=api_key))
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, runner.stop)
    console.print(f"[bold]loadtest[/] {len(feeds)} cameras → {settings.target}{settings.effective_route} "
                  f"({settings.schedule}, {settings.duration_s:g} s, SLO {settings.effective_slo_s:g} s)")
    try:
        if live:
            with Live(LiveView(runner), console=console, refresh_per_second=2, transient=True):
                records = await runner.run()
        else:
            records = await runner.run()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
    host = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "loadavg_1m_before": round(load_before[0], 2), "loadavg_1m_after": round(os.getloadavg()[0], 2)}
    doc = build_results(settings, records, extra={"windows": windows_info(feeds), "host": host, **(extra or {})})
    path = write_run(out_dir, doc, records)
    if make_plots:
        plots.write_run_plots(out_dir, records, settings.effective_slo_s, title=title)
    render_run(doc, console)
    console.print(f"results: {path}")
    return doc


def report(path: Path, make_plots: bool, out: str | None) -> int:
    """``--report``: re-renders a saved run or sweep."""
    doc = load_results(path)
    out_dir = Path(out) if out else path.parent
    if doc.get("kind") == "sweep":
        console.print(sweep_table(doc))
        if make_plots:
            console.print(f"plot: {plots.write_sweep_plot(out_dir / 'sweep.png', doc)}")
        return 0
    render_run(doc, console)
    if make_plots:
        slo = doc["summary"]["criteria"]["slo_s"]
        for p in plots.write_run_plots(out_dir, records_of(doc, path), slo, title=doc.get("title", "")):
            console.print(f"plot: {p}")
    return 0


async def amain(a: argparse.Namespace) -> int:
    """The CLI's async body; returns the exit status (0: keeps up, 1: falls behind, 2: usage error)."""
    app_config = None
    if a.config:
        from serve_app.config import app_config_from_file

        app_config = app_config_from_file(a.config)
    key_env = a.api_key_env or getattr(app_config, "api_key_env", None) or "COSMOS_SERVE_API_KEY"
    api_key = os.environ.get(key_env) or None
    out_dir = Path(a.out) if a.out else Path("runs/loadtest") / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    live = console.is_terminal if a.live is None else a.live
    levels = parse_levels(a.sweep) if a.sweep else None
    try:
        for n in levels or [a.cameras]:
            settings = settings_for(a, n, app_config)
            if app_config is not None:
                check_against_server(settings, app_config)
    except ServerLimitError as e:
        console.print(f"[red]the server config ({a.config}) refuses this run:[/] {e}")
        return 2
    is_double = a.target == "double"
    double: contextlib.AbstractContextManager[str] = contextlib.nullcontext(a.target)
    if is_double:
        from loadtest.double import running_double

        double = running_double(service_ms=a.double_service_ms, token_ms=a.double_token_ms,
                                max_concurrency=a.double_concurrency)
    with double as target:
        a.target = target
        if a.api == "openai" and not a.model:
            a.model = await served_model(target, api_key)
        extra = {"title": a.title, "server_config": a.config}
        if is_double:
            extra["test_double"] = {"service_ms": a.double_service_ms, "token_ms": a.double_token_ms,
                                    "max_concurrency": a.double_concurrency}
        if levels is None:
            doc = await run_once(settings_for(a, a.cameras, app_config), out_dir, live=live,
                                 make_plots=a.plots, title=a.title, extra=extra, api_key=api_key)
            return 0 if doc["summary"]["keeps_up"] else 1

        async def level(settings: RunSettings, sub: Path) -> dict[str, Any]:
            title = f"{a.title} — {len(settings.cameras)} cameras" if a.title else ""
            return await run_once(settings, sub, live=live, make_plots=a.plots, title=title, extra=extra,
                                  api_key=api_key)

        doc = await run_sweep(lambda n: settings_for(a, n, app_config), levels, out_dir, level,
                              search=a.sweep_search, pause_s=a.sweep_pause_s, title=a.title)
        doc.update(extra)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
        if a.plots:
            plots.write_sweep_plot(out_dir / "sweep.png", doc)
        console.print(sweep_table(doc))
        console.print(f"sweep results: {out_dir / 'results.json'}")
        return 0 if doc["best_cameras"] else 1


async def served_model(target: str, api_key: str | None) -> str:
    """The first model id of an OpenAI-compatible server's ``GET /v1/models``.

    Raises:
        SystemExit: the server lists no model or cannot be reached (the message says which).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=30.0, trust_env=False) as client:
            r = await client.get(f"{target}/v1/models", headers=headers)
            r.raise_for_status()
            return str(r.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
        raise SystemExit(f"--api openai: could not read the model name from {target}/v1/models ({e}); "
                         "give it with --model") from e


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m loadtest`` (``--streams``: :mod:`loadtest.streams`)."""
    raw = list(sys.argv[1:] if argv is None else argv)
    if "--streams" in raw:
        from loadtest import streams

        logging.basicConfig(level=logging.INFO)
        return streams.run([x for x in raw if x != "--streams"])
    p = parser()
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if a.report:
        return report(Path(a.report), a.plots, a.out)
    try:  # settings the run would refuse: a usage error naming the rule, not a traceback echoing every setting
        settings_for(a, a.cameras)
    except ValidationError as e:
        p.error("; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors()))
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        return runner.run(amain(a))


if __name__ == "__main__":
    sys.exit(main())
