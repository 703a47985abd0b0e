"""Which stream worker owns a stream, and the event cursor of several workers (Ray-free).

With ``streams.workers: N`` the cameras are shared by N stream-worker deployments, one process each
(one process reads about a hundred real-time cameras before its own API slows down:
``results/gpu/quiet-scenes/README.md``). A stream belongs to worker ``crc32(id) mod N``
(:func:`shard_of`): the worker that registers a stream draws its id until it hashes to itself
(:func:`new_stream_id`), the ingress routes every request about the stream by the same hash, and
after a restart (or a change of N) each worker resumes the stored streams that hash to it.

Each worker numbers its events in a residue class of its own (:func:`first_event_id`, step N), so
event ids are unique across workers. ``GET /v1/events`` merges the workers' events; its SSE ``id``
is the :class:`Cursor`: one position per worker (``"<id0>-<id1>-…"``, a plain integer with one
worker), which a client hands back verbatim as ``Last-Event-ID``.
"""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass

from serve_app.errors import InvalidRequestError

#: Most digits of one position in a cursor (an event id is a 64-bit integer: 19 digits).
MAX_ID_DIGITS = 19
#: Separator of the positions in a cursor of several workers (not ``.``: ``"12.34"`` would read as a number).
CURSOR_SEP = "-"


def shard_of(stream_id: str, workers: int) -> int:
    """The index (``0 … workers - 1``) of the stream worker that owns ``stream_id``: CRC-32 of the id's
    UTF-8 bytes modulo ``workers`` (stable across processes and Python versions, unlike ``hash``)."""
    return zlib.crc32(stream_id.encode()) % workers


def new_stream_id(shard: int, workers: int) -> str:
    """A fresh random stream id (``str_`` + 16 hex digits) owned by worker ``shard`` of ``workers``
    (about ``workers`` draws on average).

    Raises:
        ValueError: ``shard`` is not in ``0 … workers - 1``.
    """
    if not 0 <= shard < workers:
        raise ValueError(f"worker {shard} of {workers}")
    while True:
        sid = "str_" + uuid.uuid4().hex[:16]
        if shard_of(sid, workers) == shard:
            return sid


def first_event_id(clock_id: int, shard: int, workers: int) -> int:
    """The first event id of worker ``shard``: the smallest id ≥ ``clock_id`` (the wall clock in
    milliseconds × 1000, so ids keep increasing across restarts) that is ``shard`` modulo ``workers``;
    the worker then steps by ``workers``, so no two workers hand out the same id."""
    return clock_id + (shard - clock_id) % workers


@dataclass(frozen=True)
class Cursor:
    """Positions in the event logs of the stream workers: ``after[k]`` is the last event id of worker
    ``k`` a client has seen, None for none (from now on)."""

    after: tuple[int | None, ...]

    @classmethod
    def parse(cls, raw: str | None, workers: int) -> Cursor:
        """A cursor from a ``Last-Event-ID`` header (or ``?after=``): empty or absent → from now on;
        ``workers`` integers joined by ``-`` → one per worker; one integer, or a count of them that is not
        ``workers`` (a cursor from before ``streams.workers`` changed) → the largest for every worker. Ids
        start from the wall clock when a worker starts, so after the restart that a new count takes, every
        event of the new workers is newer than any old position: nothing is lost.

        Raises:
            InvalidRequestError (400): anything but non-negative integers of at most 19 digits joined by ``-``,
                at most 64 of them (the message says the form).
        """
        if raw is None or raw == "":
            return cls((None,) * workers)
        parts = raw.split(CURSOR_SEP)
        if not all(p.isascii() and p.isdigit() and len(p) <= MAX_ID_DIGITS for p in parts) or len(parts) > 64:
            form = "an integer" if workers == 1 else f"an integer, or {workers} integers joined by '{CURSOR_SEP}'"
            raise InvalidRequestError(
                f"Last-Event-ID must be an event id of this service ({form}): resume with the last `id:` received",
                param="Last-Event-ID",
            )
        values = [int(p) for p in parts]
        if len(values) != workers:
            return cls((max(values),) * workers)
        return cls(tuple(values))

    def moved(self, shard: int, event_id: int) -> Cursor:
        """This cursor with worker ``shard`` at ``event_id`` (never moved back)."""
        old = self.after[shard]
        new = event_id if old is None else max(old, event_id)
        return Cursor((*self.after[:shard], new, *self.after[shard + 1 :]))

    def text(self) -> str:
        """The SSE ``id`` of this position: the one id with one worker, else the ids joined by ``-``
        (a worker not yet at any position counts as 0)."""
        return CURSOR_SEP.join(str(a or 0) for a in self.after)
