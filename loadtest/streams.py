"""``python -m loadtest --streams``: N cameras registered on the service, measured from its events.

Instead of cutting windows and posting them, the load tester registers ``--cameras`` streams
(``POST /v1/streams``: looping test files, or fake RTSP cameras on loopback served by this
process, :mod:`serve_app.testing.fake_camera`), follows ``GET /v1/events`` (server-sent events,
resuming with ``Last-Event-ID``) for ``--duration-s``, and reports per camera: answers per second,
freshness p50/p95 (answer time − window end, wall clock, as the server stamps it), latency p95,
and dropped windows by reason (from ``GET /v1/streams/{id}`` at the end). The cameras are
deleted afterwards. Output folder: ``results.json``, ``answers.csv`` and ``freshness.png``.

Example::

    python -m loadtest --streams --cameras 4 --window-s 2 --fps 2 --duration-s 120
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
import numpy as np

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
                with httpx.stream("GET", f"{self.base}/v1/events", headers=headers, timeout=httpx.Timeout(60)) as r:
                    kind = None
                    for line in r.iter_lines():
                        if self._stop.is_set():
                            return
                        if line.startswith("id: "):
                            last = int(line[4:])
                        elif line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: "):
                            data = json.loads(line[6:])
                            data["_received"] = time.time()
                            (self.answers if kind == "answer" else self.others).append(data)
            except (httpx.HTTPError, ValueError):
                pass
            if not self._stop.is_set():
                self.reconnects += 1
                time.sleep(1.0)

    def stop(self) -> None:
        self._stop.set()


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def summarize(answers: list[dict[str, Any]], statuses: dict[str, dict[str, Any]], duration_s: float) -> dict[str, Any]:
    """The report of a streams run.

    Args:
        answers: answer events (``/v1/events`` ``answer`` data); only the standing question (index 0) counts.
        statuses: ``GET /v1/streams/{id}`` bodies at the end, by stream id.
        duration_s: seconds measured.

    Returns:
        ``{"total": {...}, "cameras": {id: {...}}}`` with answers, answers_per_s, freshness_s_p50/p95,
        latency_ms_p95 and dropped windows (by reason and total).
    """
    std = [a for a in answers if a.get("question_index", 0) == 0]
    cams = {}
    for sid, st in statuses.items():
        mine = [a for a in std if a["stream_id"] == sid]
        fresh = [a["timings"]["freshness_s"] for a in mine]
        dropped = st.get("windows_dropped", {})
        cams[sid] = {
            "name": st.get("name"),
            "answers": len(mine),
            "answers_per_s": round(len(mine) / duration_s, 4) if duration_s > 0 else None,
            "freshness_s_p50": _pct(fresh, 50),
            "freshness_s_p95": _pct(fresh, 95),
            "latency_ms_p95": _pct([a["timings"]["latency_ms"] for a in mine], 95),
            "dropped": dropped,
            "dropped_total": sum(dropped.values()),
            "state": st.get("state"),
        }
    fresh = [a["timings"]["freshness_s"] for a in std if a["stream_id"] in statuses]
    total = {
        "answers": sum(c["answers"] for c in cams.values()),
        "answers_per_s": round(sum(c["answers"] for c in cams.values()) / duration_s, 4) if duration_s > 0 else None,
        "freshness_s_p50": _pct(fresh, 50),
        "freshness_s_p95": _pct(fresh, 95),
        "dropped_total": sum(c["dropped_total"] for c in cams.values()),
        "every_camera_answered": bool(cams) and all(c["answers"] > 0 for c in cams.values()),
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
            for a in answers
            if a["stream_id"] == sid and a["question_index"] == 0
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=".", label=name or sid)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("freshness (s): answer − window end")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``--streams`` mode's options."""
    ap.add_argument("--streams", action="store_true", help="register cameras on the service and measure its events")
    ap.add_argument("--target", default="http://127.0.0.1:8000")
    ap.add_argument("--cameras", type=int, default=4)
    ap.add_argument("--source", choices=["file", "fake-rtsp"], default="file",
                    help="file: looping test clips (under the server's allowed roots); fake-rtsp: fake RTSP "
                    "cameras on 127.0.0.1 served by this process (the server must allow 127.0.0.1)")
    ap.add_argument("--window-s", type=float, default=2.0)
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--question", default="What is happening?")
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--api-key", default=None, help="sent as Authorization: Bearer (default: none)")
    ap.add_argument("--out", help="output folder (default: runs/loadtest/streams-<time>)")


def run(argv: list[str]) -> int:
    """``python -m loadtest --streams ...`` (see the module docstring). Returns the exit code."""
    import contextlib

    ap = argparse.ArgumentParser(prog="python -m loadtest --streams", description=__doc__.split("\n")[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    out = Path(a.out) if a.out else Path("runs/loadtest") / ("streams-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    ids: list[str] = []
    with contextlib.ExitStack() as stack, httpx.Client(base_url=a.target, headers=headers, timeout=60) as client:
        urls = []
        for i in range(a.cameras):
            if a.source == "fake-rtsp":
                from serve_app.testing.fake_camera import FakeCamera

                urls.append(stack.enter_context(FakeCamera(seconds=4.0, fps=10, realtime=True, loop=True)).url)
            else:
                urls.append(DEFAULT_FILES[i % len(DEFAULT_FILES)])
        events = EventReader(a.target, headers)
        try:
            for i, url in enumerate(urls):
                r = client.post("/v1/streams", json={
                    "url": url, "name": f"load-{i}", "window_s": a.window_s, "fps": a.fps, "loop": a.source == "file",
                    "questions": [a.question], "max_tokens": a.max_tokens})  # fmt: skip
                if r.status_code != 201:
                    logger.error("registering camera %d failed: %s %s", i, r.status_code, r.text[:300])
                    return 2
                ids.append(r.json()["id"])
            t0 = time.time()
            time.sleep(a.duration_s)
            duration = time.time() - t0
            statuses = {sid: client.get(f"/v1/streams/{sid}").json() for sid in ids}
        finally:
            events.stop()
            for sid in ids:
                with contextlib.suppress(httpx.HTTPError):
                    client.delete(f"/v1/streams/{sid}")
    answers = [x for x in events.answers if x["stream_id"] in ids and x["_received"] >= t0]
    report = summarize(answers, statuses, duration)
    doc = {"mode": "streams", "command": "python -m loadtest --streams " + " ".join(argv),
           "settings": {k: v for k, v in vars(a).items() if k != "api_key"}, "duration_s": round(duration, 1),
           "event_reconnects": events.reconnects, **report}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    with open(out / "answers.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stream_id", "window_index", "window_end_s", "received", "freshness_s", "latency_ms", "answer"])
        for x in answers:
            w.writerow([x["stream_id"], x["window_index"], x["window"]["end_s"], round(x["_received"], 3),
                        x["timings"]["freshness_s"], x["timings"]["latency_ms"], x["answer"]])
    _plot(answers, {sid: statuses[sid].get("name") for sid in ids}, out / "freshness.png", t0)
    print(json.dumps(report["total"], indent=1))
    print(f"report: {out / 'results.json'}")
    return 0 if report["total"]["every_camera_answered"] else 1
