"""``python -m loadtest --streams``: N cameras registered on the service, measured from its events.

Instead of cutting windows and posting them, the load tester registers ``--cameras`` streams
(``POST /v1/streams``: looping test files, or fake RTSP cameras on loopback served by this
process, :mod:`serve_app.testing.fake_camera`), follows ``GET /v1/events`` (server-sent events,
resuming with ``Last-Event-ID``) for ``--duration-s``, and reports per camera: answers per second,
freshness p50/p95 (answer time − window end, wall clock, as the server stamps it), latency p95,
and dropped windows by reason (from ``GET /v1/streams/{id}`` at the end). The cameras are
deleted afterwards. Output folder: ``results.json``, ``answers.csv`` and ``freshness.png``.

A level keeps up when every camera answered, p95 freshness ≤ ``--slo-s`` (3 s), dropped windows ≤
``--max-drop-rate`` of those cut and freshness does not grow (:func:`verdict`); ``--sweep``/``--sweep-search``
find the most cameras that keep up, as the request mode's sweep does. Several ``--question`` s are asked
about every window (the service shares the window's clip among them); ``--ignore-eos`` fixes the answer
length (the server must allow it); ``--skip-unchanged`` registers quiet-scene cameras.

Examples::

    python -m loadtest --streams --cameras 4 --window-s 2 --fps 2 --duration-s 120
    python -m loadtest --streams --window-s 10 --fps 4 --max-tokens 256 --ignore-eos --question A --question B
        --question C --duration-s 60 --warmup-s 15 --sweep 8,16,24,32 --sweep-search
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

from loadtest.statistics import lag_growth, percentile
from serve_app.cameras.protocol import AnswerTimings

logger = logging.getLogger("loadtest")

#: Looping file cameras (under the server's sources.allowed_roots; configs/cpu.yaml allows tests/data).
DEFAULT_FILES = ["intel_car-detection.mp4", "intel_bottle-detection.mp4", "vtest_h264_bframes.mp4",
                 "bgslibrary_video02_highway_cctv.avi"]


class EventReader:
    """Follows ``GET /v1/events`` in a thread; keeps answer events (with their arrival time) and the rest.

    Args:
        base: the service's base URL.
        headers: extra request headers (e.g. ``Authorization``).
    """

    def __init__(self, base: str, headers: dict[str, str] | None = None):
        self.base, self.headers = base, dict(headers or {})
        self.answers: list[dict[str, Any]] = []
        self.others: list[dict[str, Any]] = []
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = None
        while not self._stop.is_set():
            try:
                headers = {**self.headers, **({"Last-Event-ID": str(last)} if last else {})}
                with httpx.Client(timeout=httpx.Timeout(60)) as client, connect_sse(
                    client, "GET", f"{self.base}/v1/events", headers=headers
                ) as source:
                    for sse in source.iter_sse():  # httpx-sse: id / event / data framing (WHATWG)
                        if self._stop.is_set():
                            return
                        if sse.id:
                            last = sse.id  # opaque: one position per stream worker (serve_app/cameras/shards.py)
                        if not sse.data:
                            continue
                        data = json.loads(sse.data)
                        data["_received"] = time.time()
                        (self.answers if sse.event == "answer" else self.others).append(data)
            except (httpx.HTTPError, ValueError):  # SSEError is an httpx.TransportError
                pass
            if not self._stop.is_set():
                self.reconnects += 1
                time.sleep(1.0)

    def stop(self) -> None:
        self._stop.set()


#: The answer events' server-side timings (ms) the report breaks a window's time into: every millisecond
#: field of the contract's :class:`~serve_app.cameras.protocol.AnswerTimings`, in its order.
SERVER_TIMINGS = tuple(name for name in AnswerTimings.model_fields if name.endswith("_ms"))


def server_timings(answers: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """p50 and p95 of each of :data:`SERVER_TIMINGS` over every answer (every question; null values left out),
    milliseconds: ``{"ttft_ms": {"p50": …, "p95": …}, …}`` (where a window's time went on the server)."""
    out = {}
    for key in SERVER_TIMINGS:
        values = [float(v) for a in answers if (v := a["timings"].get(key)) is not None]
        out[key] = {"p50": percentile(values, 50), "p95": percentile(values, 95)}
    return out


def window_answers(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One answer per answered window: the one with the largest freshness among its questions' answers.

    Args:
        answers: answer events; a window is keyed by ``(stream_id, window_index)`` (an event without a
            ``window_index`` is a window of its own).

    Returns:
        The windows' last answers, in the order their windows were first seen.
    """
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for i, a in enumerate(answers):
        key = (a["stream_id"], a["window_index"] if "window_index" in a else -1 - i)
        if key not in last or a["timings"]["freshness_s"] > last[key]["timings"]["freshness_s"]:
            last[key] = a
    return list(last.values())


def summarize(answers: list[dict[str, Any]], statuses: dict[str, dict[str, Any]], duration_s: float) -> dict[str, Any]:
    """The report of a streams run.

    Args:
        answers: answer events (``/v1/events`` ``answer`` data). A window counts once, with the freshness of
            its last answer (:func:`window_answers`): with several questions, a window is answered when every
            question is (until 2026-12-02 only the first question's answer counted, and the graph asks the
            others after its first token, so their lateness went unseen).
        statuses: ``GET /v1/streams/{id}`` bodies at the end, by stream id.
        duration_s: seconds measured.

    Returns:
        ``{"total": {...}, "cameras": {id: {...}}}`` with answers (windows answered), answers_per_s,
        freshness_s_p50/p95 (seconds, per window), first_question_freshness_s_p95 (total only),
        latency_ms_p95, windows cut and skipped (``skip_unchanged``: not sent to the model) and dropped
        windows (by reason and total); the total also has ``server_ms`` (:func:`server_timings`).
    """
    std = window_answers(answers)
    first_q = [a["timings"]["freshness_s"] for a in answers
               if a.get("question_index", 0) == 0 and a["stream_id"] in statuses]
    cams = {}
    for sid, st in statuses.items():
        mine = [a for a in std if a["stream_id"] == sid]
        fresh = [a["timings"]["freshness_s"] for a in mine]
        dropped = st.get("windows_dropped", {})
        cams[sid] = {
            "name": st.get("name"),
            "answers": len(mine),
            "answers_per_s": round(len(mine) / duration_s, 4) if duration_s > 0 else None,
            "freshness_s_p50": percentile(fresh, 50),
            "freshness_s_p95": percentile(fresh, 95),
            "latency_ms_p95": percentile([a["timings"]["latency_ms"] for a in mine], 95),
            "windows_cut": st.get("windows_cut", 0),
            "windows_skipped": st.get("windows_skipped", 0),
            "dropped": dropped,
            "dropped_total": sum(dropped.values()),
            "state": st.get("state"),
            "status_unread": st.get("status_unread"),
        }
    fresh = [a["timings"]["freshness_s"] for a in std if a["stream_id"] in statuses]
    total = {
        "answers": sum(c["answers"] for c in cams.values()),
        "answers_per_s": round(sum(c["answers"] for c in cams.values()) / duration_s, 4) if duration_s > 0 else None,
        "freshness_s_p50": percentile(fresh, 50),
        "freshness_s_p95": percentile(fresh, 95),
        "first_question_freshness_s_p95": percentile(first_q, 95),
        "windows_cut": sum(c["windows_cut"] for c in cams.values()),
        "windows_skipped": sum(c["windows_skipped"] for c in cams.values()),
        "dropped_total": sum(c["dropped_total"] for c in cams.values()),
        "every_camera_answered": bool(cams) and all(c["answers"] > 0 for c in cams.values()),
        "status_unread": sum(1 for st in statuses.values() if "status_unread" in st),
        "server_ms": server_timings([a for a in answers if a["stream_id"] in statuses]),
    }
    return {"total": total, "cameras": cams}


def _plot(answers: list[dict[str, Any]], names: dict[str, str], path: Path, t0: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for sid, name in names.items():
        pts = [
            (a["_received"] - t0, a["timings"]["freshness_s"])
            for a in window_answers(answers)
            if a["stream_id"] == sid
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=".", label=name or sid)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("freshness (s): answer − window end")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def verdict(report: dict[str, Any], answers: list[dict[str, Any]], slo_s: float, max_drop_rate: float,
            max_growth: float, windows_cut: int) -> dict[str, Any]:
    """Whether the cameras kept up: every camera answered, p95 freshness ≤ ``slo_s``, dropped windows
    ≤ ``max_drop_rate`` of those cut, and freshness not growing by more than ``max_growth`` seconds per
    second over the run (a least-squares slope over the windows' last answers, :func:`window_answers`).

    Returns:
        ``{"keeps_up": bool, "reasons": [...], "freshness_growth_s_per_s": float | None, "drop_rate": float}``.
    """
    total = report["total"]
    reasons = []
    if not total["every_camera_answered"]:
        reasons.append("a camera got no answer")
    if total.get("status_unread"):
        reasons.append(f"{total['status_unread']} cameras' status not read (the streams API did not answer in time)")
    p95 = total["freshness_s_p95"]
    if p95 is None or p95 > slo_s:
        reasons.append(f"p95 freshness {p95} s > SLO {slo_s:g} s")
    drop_rate = total["dropped_total"] / windows_cut if windows_cut else 0.0
    if drop_rate > max_drop_rate:
        reasons.append(f"{total['dropped_total']} of {windows_cut} windows dropped "
                       f"({drop_rate:.1%} > {max_drop_rate:.1%})")
    std = sorted(window_answers(answers), key=lambda a: a["_received"])
    t0 = std[0]["_received"] if std else 0.0
    slope = lag_growth([a["_received"] - t0 for a in std], [a["timings"]["freshness_s"] for a in std], min_points=3)
    growth = None if slope is None else round(slope, 4)
    if growth is not None and growth > max_growth:
        reasons.append(f"freshness grows {growth} s/s > {max_growth:g}")
    return {"keeps_up": not reasons, "reasons": reasons, "freshness_growth_s_per_s": growth,
            "drop_rate": round(drop_rate, 4)}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``--streams`` mode's options."""
    ap.add_argument("--streams", action="store_true", help="register cameras on the service and measure its events")
    ap.add_argument("--target", default="http://127.0.0.1:8000")
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--source", choices=["file", "fake-rtsp"], default="file",
                    help="file: looping test clips (under the server's allowed roots); fake-rtsp: fake RTSP "
                    "cameras on 127.0.0.1 served by this process (the server must allow 127.0.0.1)")
    ap.add_argument("--file", action="append", help="file cameras: clip names under the server's allowed roots "
                    "(repeat; cameras take them in turn; default: four test clips)")
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--question", action="append", help="a question asked about every window (repeat for several; "
                    "default: 'What is happening?')")
    ap.add_argument("--ignore-eos", action="store_true", help="answers run to --max-tokens (server must allow it)")
    ap.add_argument("--skip-unchanged", type=float, metavar="THRESHOLD",
                    help="register the cameras with skip_unchanged at this threshold (quiet scenes)")
    ap.add_argument("--max-skip-s", type=float, default=60.0, help="with --skip-unchanged: forced answer period")
    ap.add_argument("--stagger", choices=["uniform", "none"], default="uniform",
                    help="uniform: cameras registered one period / N apart (the period: the window, or with "
                    "--skip-unchanged the longer --max-skip-s), so their requests spread over it as independent "
                    "cameras' do; none: all at once (their windows, and forced answers, come together)")
    ap.add_argument("--duration-s", type=float, default=60.0, help="measured time after the last registration (s)")
    ap.add_argument("--warmup-s", type=float, default=0.0,
                    help="answers received earlier (after the last registration) are not measured")
    ap.add_argument("--slo-s", type=float, default=3.0, help="keeps up: p95 freshness at most this (s)")
    ap.add_argument("--max-drop-rate", type=float, default=0.01, help="keeps up: dropped / cut windows at most this")
    ap.add_argument("--max-growth", type=float, default=0.05, help="keeps up: freshness growth at most this (s/s)")
    ap.add_argument("--sweep", help="camera counts to try, e.g. 8,16,32 (ascending; stops at the first failure)")
    ap.add_argument("--sweep-search", action="store_true", help="then bisect between best pass and first failure")
    ap.add_argument("--sweep-pause-s", type=float, default=10.0, help="idle time between sweep levels")
    ap.add_argument("--status-timeout-s", type=float, default=10.0,
                    help="bound on each camera's status read and delete at the end of a level (s)")
    ap.add_argument("--api-key", default=None, help="sent as Authorization: Bearer (default: none)")
    ap.add_argument("--out", help="output folder (default: runs/loadtest/streams-<time>)")


def stagger_period_s(a: argparse.Namespace) -> float:
    """The period over which ``--stagger uniform`` spreads the cameras' registrations, seconds: the window;
    with ``--skip-unchanged`` the longer of it and ``--max-skip-s`` (a quiet camera's forced answers come
    that far apart; cameras started within one window would all force theirs in the same few seconds)."""
    if a.skip_unchanged is not None:
        return max(float(a.window_s), float(a.max_skip_s))
    return float(a.window_s)


def settings(a: argparse.Namespace) -> dict[str, Any]:
    """The options as a result file records them: without the API key, and without the ``--streams`` flag
    itself (parsed after the mode was chosen, it read False; ``mode`` says it)."""
    return {k: v for k, v in vars(a).items() if k not in ("api_key", "streams")}


def stream_body(a: argparse.Namespace, i: int, url: str) -> dict[str, Any]:
    """The ``POST /v1/streams`` body of camera ``i``."""
    body = {"url": url, "name": f"load-{i}", "window_s": a.window_s, "fps": a.fps, "loop": a.source == "file",
            "questions": list(a.question or ["What is happening?"]), "max_tokens": a.max_tokens}
    if a.ignore_eos:
        body["ignore_eos"] = True
    if a.skip_unchanged is not None:
        body["skip_unchanged"] = {"threshold": a.skip_unchanged, "max_skip_s": a.max_skip_s}
    return body


#: Status reads and deletes in flight at once at the end of a level (150 sequential reads of a busy
#: stream worker outlasted a 10-min GPU call on 2026-12-02: results/gpu/quiet-scenes/README.md).
END_OF_LEVEL_THREADS = 16


def each(ids: list[str], call: Any) -> list[Any]:
    """``call(id)`` for every id, :data:`END_OF_LEVEL_THREADS` at once; an HTTP error is returned, not raised."""
    from concurrent.futures import ThreadPoolExecutor

    def safe(sid: str) -> Any:
        try:
            return call(sid)
        except httpx.HTTPError as e:
            return e

    with ThreadPoolExecutor(END_OF_LEVEL_THREADS) as pool:
        return list(pool.map(safe, ids))


def read_statuses(client: Any, ids: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    """``GET /v1/streams/{id}`` of every camera, several at once, each bounded by ``timeout_s``.

    Returns:
        The bodies by id; a camera whose status did not come back (an error, a timeout, a non-200) gets
        ``{"status_unread": "<why>"}``, which :func:`verdict` counts as not keeping up.
    """
    out: dict[str, dict[str, Any]] = {}
    for sid, r in zip(ids, each(ids, lambda sid: client.get(f"/v1/streams/{sid}", timeout=timeout_s)), strict=True):
        if isinstance(r, Exception):
            out[sid] = {"status_unread": f"{type(r).__name__} after at most {timeout_s:g} s"}
        elif r.status_code != 200:
            out[sid] = {"status_unread": f"HTTP {r.status_code}"}
        else:
            out[sid] = r.json()
    return out


def run_level(a: argparse.Namespace, n: int, out: Path, argv: list[str]) -> dict[str, Any]:
    """One level: ``n`` cameras for ``--duration-s``; writes ``results.json``, ``answers.csv``, ``freshness.png``.

    Raises:
        RuntimeError: a camera's registration was refused (the status and message say why).
    """
    import contextlib

    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    files = a.file or DEFAULT_FILES
    ids: list[str] = []
    with contextlib.ExitStack() as stack, httpx.Client(base_url=a.target, headers=headers, timeout=60) as client:
        urls = []
        for i in range(n):
            if a.source == "fake-rtsp":
                from serve_app.testing.fake_camera import FakeCamera

                urls.append(stack.enter_context(FakeCamera(seconds=4.0, fps=10, realtime=True, loop=True)).url)
            else:
                urls.append(files[i % len(files)])
        events = EventReader(a.target, headers)
        try:
            for i, url in enumerate(urls):
                if i and a.stagger == "uniform":
                    time.sleep(stagger_period_s(a) / n)
                r = client.post("/v1/streams", json=stream_body(a, i, url))
                if r.status_code != 201:
                    raise RuntimeError(f"registering camera {i} failed: {r.status_code} {r.text[:300]}")
                ids.append(r.json()["id"])
            t0 = time.time()
            time.sleep(a.duration_s)
            duration = time.time() - t0 - a.warmup_s
            statuses = read_statuses(client, ids, a.status_timeout_s)
        finally:
            events.stop()
            each(ids, lambda sid: client.delete(f"/v1/streams/{sid}", timeout=a.status_timeout_s))
    answers = [x for x in events.answers if x["stream_id"] in ids and x["_received"] >= t0 + a.warmup_s]
    report = summarize(answers, statuses, duration)
    report["total"]["answers_all_questions"] = len(answers)
    cut = sum(st.get("windows_cut", 0) for st in statuses.values())
    summary = verdict(report, answers, a.slo_s, a.max_drop_rate, a.max_growth, cut)
    doc = {"mode": "streams", "command": "python -m loadtest --streams " + " ".join(argv), "cameras_count": n,
           "settings": settings(a), "duration_s": round(duration, 1),
           "event_reconnects": events.reconnects, "summary": summary, **report}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    with open(out / "answers.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stream_id", "window_index", "question_index", "window_end_s", "received", "freshness_s",
                    *SERVER_TIMINGS, "answer"])
        for x in answers:
            w.writerow([x["stream_id"], x["window_index"], x.get("question_index", 0), x["window"]["end_s"],
                        round(x["_received"], 3), x["timings"]["freshness_s"],
                        *(x["timings"].get(k) for k in SERVER_TIMINGS), x["answer"]])
    _plot(answers, {sid: statuses[sid].get("name") or sid for sid in ids}, out / "freshness.png", t0)
    return doc


def run(argv: list[str]) -> int:
    """``python -m loadtest --streams ...`` (see the module docstring). Returns the exit code: 0 keeps up
    (a sweep: some level kept up), 1 not, 2 a registration was refused or the service could not be reached."""
    from loadtest.sweep import next_search_level, parse_levels, sweep_decision

    ap = argparse.ArgumentParser(prog="python -m loadtest --streams", description=__doc__.split("\n")[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    out = Path(a.out) if a.out else Path("runs/loadtest") / ("streams-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    try:
        if not a.sweep:
            doc = run_level(a, a.cameras, out, argv)
            print(json.dumps({**doc["total"], **doc["summary"]}, indent=1))
            print(f"report: {out / 'results.json'}")
            return 0 if doc["summary"]["keeps_up"] else 1
        outcomes: list[tuple[int, bool]] = []
        levels: list[dict[str, Any]] = []

        def one(n: int) -> bool:
            if levels:
                time.sleep(a.sweep_pause_s)
            doc = run_level(a, n, out / f"cameras-{n:03d}", argv)
            ok = bool(doc["summary"]["keeps_up"])
            outcomes.append((n, ok))
            levels.append({"cameras": n, "results": f"cameras-{n:03d}/results.json", "summary": doc["summary"],
                           "total": doc["total"]})
            logger.info("streams sweep, %d cameras: %s", n, "keeps up" if ok else "; ".join(doc["summary"]["reasons"]))
            return ok

        for n in parse_levels(a.sweep):
            if not one(n):
                break
        while a.sweep_search and (nxt := next_search_level(outcomes)) is not None:
            if nxt in {c for c, _ in outcomes}:
                break
            one(nxt)
    except RuntimeError as e:
        logger.error("%s", e)
        return 2
    except httpx.TransportError as e:  # no service there, or it went away: say so, without a traceback
        logger.error("could not reach the service at %s (%s: %s)", a.target, type(e).__name__, e)
        return 2
    doc = {"kind": "sweep", "mode": "streams", "command": "python -m loadtest --streams " + " ".join(argv),
           "settings": settings(a),
           "levels": sorted(levels, key=lambda lv: lv["cameras"]), "best_cameras": sweep_decision(outcomes)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({"best_cameras": doc["best_cameras"], "levels": outcomes}))
    print(f"sweep results: {out / 'results.json'}")
    return 0 if doc["best_cameras"] else 1
