"""Issue 25 item 7: repeated error logging is rate-limited everywhere (one helper, serve_app.log_limit).

A camera that failed the same way forever logged every reconnect (14,955 tracebacks in 20 s for one
stream); now each source logs its first few messages per window and counts the rest.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

from serve_app.cameras.protocol import AlertRule, StreamCreate
from serve_app.cameras.reader import CameraReader
from serve_app.cameras.webhook import Webhooks
from serve_app.config import AppConfig
from serve_app.log_limit import LogLimiter

LOGGER = logging.getLogger("test.log_limit")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_key_logs_its_burst_per_window_and_counts_the_rest(caplog):
    clock = Clock()
    lim = LogLimiter(burst=3, window_s=60, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        logged = [lim.log(LOGGER, logging.INFO, "cam a", "cam a failed %d", i) for i in range(1000)]
        other = lim.log(LOGGER, logging.INFO, "cam b", "cam b failed")  # another key has its own budget
        clock.now = 61.0
        again = lim.log(LOGGER, logging.INFO, "cam a", "cam a failed again")
    assert logged.count(True) == 3 and logged[:3] == [True] * 3 and other and again
    assert lim.dropped_total == 997
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 5
    assert messages[-1] == "cam a failed again (997 similar messages dropped in the last 60 s)"


def test_keys_are_bounded():
    lim = LogLimiter(burst=1, window_s=60, max_keys=10, clock=Clock())
    for i in range(10_000):  # made-up keys (a hostile client's host names) cannot grow it
        lim.allow(f"host {i}")
    assert len(lim._keys) == 10


def test_a_camera_failing_forever_logs_a_few_lines_not_one_per_reconnect(caplog):
    """A camera on a closed port fails at once, every time: 40 reconnects used to be 40 log lines."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    cfg = AppConfig.model_validate({
        "sources": {"allow_private_networks": True},
        "streams": {"db_path": None, "reconnect_initial_s": 0.001, "reconnect_max_s": 0.001,
                    "max_failed_connects": 0},
    })  # fmt: skip
    states: list[str] = []
    reader = CameraReader(StreamCreate(url=f"http://127.0.0.1:{port}/cam.mp4", questions=["q"], window_s=1, fps=1),
                          cfg, lambda w: None, lambda st, err: states.append(st))  # fmt: skip
    done = threading.Event()
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        reader.start()
        for _ in range(600):
            if reader.reconnects >= 40:
                break
            done.wait(0.05)
        reader.stop()
        reader.join(10)
    lines = [r for r in caplog.records if "reconnecting in" in r.getMessage()]
    assert reader.reconnects >= 40, states[-3:]
    assert 1 <= len(lines) <= 5, len(lines)


def test_a_webhook_endpoint_that_is_down_logs_a_few_lines(caplog):
    """50 alerts to a refused webhook used to log 50 warnings."""
    cfg = AppConfig.model_validate({"streams": {"db_path": None, "webhook_retries": 0}})
    hooks = Webhooks(cfg)

    async def main():
        for _ in range(50):
            hooks.send("http://127.0.0.1:9/hook", AlertRule())  # loopback: refused by the address check
            await hooks.drain()

    with caplog.at_level(logging.WARNING, logger="ray.serve"):
        asyncio.run(main())
    assert hooks.failed == 50
    assert 1 <= len([r for r in caplog.records if "webhook" in r.getMessage()]) <= 5
