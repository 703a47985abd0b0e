"""Registered streams and their bounded answer history in an embedded SQLite database.

The stream worker writes a stream's definition (the validated :class:`StreamCreate` as JSON)
when it is registered and deletes it when it is removed; on start it reads them all back, so
streams resume by themselves after ``serve run`` restarts or the worker's replica dies. Each
answer is kept with its window's JPEG thumbnail, at most ``keep`` rows per stream (older rows
are deleted as new ones arrive). WAL mode: readers never block the writer.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

from pydantic import ValidationError

from serve_app.cameras.protocol import AnswerEvent, StreamCreate
from serve_app.log_limit import LOG_LIMIT, get_logger
from serve_app.text import log_safe

logger = get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS answers (
    stream_id TEXT NOT NULL, event_id INTEGER NOT NULL, created_at REAL NOT NULL,
    event TEXT NOT NULL, thumbnail BLOB,
    PRIMARY KEY (stream_id, event_id)
);
"""


class StreamStore:
    """The streams database (thread-safe: one connection behind a lock).

    Args:
        path: the SQLite file (created with its parent directory if missing); None: in memory only.
        keep: answers (with thumbnails) kept per stream.
    """

    def __init__(self, path: str | Path | None, keep: int = 50):
        if path is None or str(path) == ":memory:":
            path = ":memory:"
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Several stream workers (streams.workers) share one file: a writer waits up to 10 s for another's lock.
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.keep = keep

    def add(self, stream_id: str, spec: StreamCreate, created_at: float | None = None) -> None:
        """Stores a stream's definition."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO streams VALUES (?, ?, ?)",
                (stream_id, spec.model_dump_json(), created_at or time.time()),
            )

    def remove(self, stream_id: str) -> None:
        """Deletes a stream and its answers."""
        with self._lock:
            self._db.execute("DELETE FROM streams WHERE id = ?", (stream_id,))
            self._db.execute("DELETE FROM answers WHERE stream_id = ?", (stream_id,))

    def streams(self) -> list[tuple[str, StreamCreate, float]]:
        """Every stored stream as ``(id, spec, created_at)``, oldest first. Rows that no longer
        validate (an older schema) are skipped."""
        with self._lock:
            rows = self._db.execute("SELECT id, spec, created_at FROM streams ORDER BY created_at").fetchall()
        out = []
        for sid, spec, created in rows:
            try:
                out.append((sid, StreamCreate.model_validate_json(spec), created))
            except ValueError:
                continue
        return out

    def add_answer(self, stream_id: str, event_id: int, event_json: str, thumbnail: bytes | None) -> None:
        """Stores one answer event (JSON) and its thumbnail (JPEG bytes); keeps the newest ``keep``."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?)",
                (stream_id, event_id, time.time(), event_json, thumbnail),
            )
            self._db.execute(
                "DELETE FROM answers WHERE stream_id = ? AND event_id NOT IN "
                "(SELECT event_id FROM answers WHERE stream_id = ? ORDER BY event_id DESC LIMIT ?)",
                (stream_id, stream_id, self.keep),
            )

    def answers(self, stream_id: str, limit: int = 50) -> tuple[AnswerEvent, ...]:
        """The newest answers of a stream, newest first, as the frozen events they were stored from.

        A stored row that is no longer a valid :class:`AnswerEvent` (written by a version whose event had
        other fields) is left out and counted in the log, never returned half-typed.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT event FROM answers WHERE stream_id = ? ORDER BY event_id DESC LIMIT ?", (stream_id, limit)
            ).fetchall()
        out: list[AnswerEvent] = []
        for (text,) in rows:
            try:
                out.append(AnswerEvent.model_validate_json(text))
            except ValidationError:
                LOG_LIMIT.log(logger, logging.WARNING, f"stored answers {stream_id}",
                              "stream %s: a stored answer of another version's format was left out of its history",
                              log_safe(stream_id))
        return tuple(out)

    def count_answers(self, stream_id: str) -> int:
        """Answers stored for a stream (≤ ``keep``)."""
        with self._lock:
            n: int = self._db.execute("SELECT COUNT(*) FROM answers WHERE stream_id = ?", (stream_id,)).fetchone()[0]
        return n

    def thumbnail(self, stream_id: str) -> bytes | None:
        """The newest thumbnail of a stream (JPEG), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT thumbnail FROM answers WHERE stream_id = ? AND thumbnail IS NOT NULL "
                "ORDER BY event_id DESC LIMIT 1",
                (stream_id,),
            ).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        with self._lock:
            self._db.close()
