"""One record per request of a load run: what was sent, when, and what came back.

Times in a :class:`RequestRecord` are seconds since the run started (the
runner's clock, ``time.perf_counter`` by default); durations are milliseconds
where the name says ``_ms``. Definitions (also in the README's "Load testing" section):

* **latency**: response complete − request sent (client side).
* **TTFT**: first streamed ``delta`` event − request sent (streaming only).
* **scheduling lag**: request sent − request scheduled (the client's own delay).
* **freshness**: answer time − end of the window the answer is about. For the
  real-time schedule a window ends when its last frame would have been
  recorded, which is also when its request is scheduled.
* **deadline miss**: the answer arrives after the camera's next window ends
  (freshness > the gap to the camera's next window).

A request still running when the run stops is recorded as an ``unfinished``
error whose freshness is a lower bound (stop time − window end); so is a
client timeout. Other errors have no freshness; every error is a deadline miss.

Statistics over records live in :mod:`loadtest.statistics`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Error kinds where the answer may still be coming: their freshness is a lower bound.
CENSORED_KINDS = ("timeout", "unfinished")


@dataclasses.dataclass
class RequestRecord:
    """One request of a run; one row of ``requests.csv``.

    Attributes:
        seq: request number in schedule order.
        camera_id: the camera that sent it.
        window_index: window number within the camera's source.
        warmup: sent during warm-up (excluded from every metric).
        scheduled_s: when the schedule wanted it sent (s since run start).
        sent_s: when the client started sending it (s).
        window_end_s: end of the window the request is about (s); freshness is measured from it.
        deadline_s: time allowed before the camera's next window ends (s after ``window_end_s``).
        first_token_s: first streamed delta received (s), streaming only.
        done_s: response fully received (s); None if it never finished.
        stopped_s: when the run gave up on an unfinished request (s).
        status: HTTP status (0: no response).
        error_kind: None (success), ``http``, ``stream``, ``timeout``, ``connect``, ``protocol`` or ``unfinished``.
        error_type, error_message: the server's ``error.type``/``message`` or the client exception.
        request_id: the server's ``X-Request-Id``.
        decode_ms, queue_ms, model_ms, server_ttft_ms, server_total_ms: the response's ``timings``.
        prompt_tokens, completion_tokens, video_tokens: the response's ``usage``.
        num_frames: frames the server sampled.
        bytes_sent: clip bytes uploaded.
        delta_events: streamed ``delta`` events received (streaming only).
        retry_after_s: the ``Retry-After`` header of a refused request, seconds (None: absent).
        question_index: which of the camera's questions it asked (``all_questions``), None: round-robin.
    """

    seq: int
    camera_id: str
    window_index: int
    warmup: bool
    scheduled_s: float
    sent_s: float
    window_end_s: float
    deadline_s: float
    first_token_s: float | None = None
    done_s: float | None = None
    stopped_s: float | None = None
    status: int = 0
    error_kind: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    request_id: str | None = None
    decode_ms: float | None = None
    queue_ms: float | None = None
    model_ms: float | None = None
    server_ttft_ms: float | None = None
    server_total_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    video_tokens: int | None = None
    num_frames: int | None = None
    bytes_sent: int = 0
    delta_events: int = 0
    retry_after_s: float | None = None
    question_index: int | None = None

    @property
    def ok(self) -> bool:
        """Answered with a 2xx and a complete response."""
        return self.error_kind is None and self.done_s is not None

    @property
    def lag_ms(self) -> float:
        """Client scheduling lag: sent − scheduled, milliseconds."""
        return (self.sent_s - self.scheduled_s) * 1000

    @property
    def latency_ms(self) -> float | None:
        """End-to-end latency (sent → complete), milliseconds; None if unfinished."""
        return None if self.done_s is None else (self.done_s - self.sent_s) * 1000

    @property
    def ttft_ms(self) -> float | None:
        """Client-side time to first token, milliseconds (streaming only)."""
        return None if self.first_token_s is None else (self.first_token_s - self.sent_s) * 1000

    @property
    def freshness_s(self) -> float | None:
        """Answer time − window end, seconds.

        For a client timeout or an unfinished request it is a lower bound (the
        time the client gave up); for other errors there is no answer: None.
        """
        if self.ok and self.done_s is not None:  # an ok record always has its answer time
            return self.done_s - self.window_end_s
        if self.error_kind in CENSORED_KINDS:
            end = self.stopped_s if self.stopped_s is not None else self.done_s
            return None if end is None else end - self.window_end_s
        return None

    @property
    def missed(self) -> bool:
        """Deadline miss: not answered before the camera's next window ended."""
        freshness_s = self.freshness_s
        return (not self.ok) or freshness_s is None or freshness_s > self.deadline_s

    #: Derived columns written to the CSV after the stored fields.
    DERIVED = ("ok", "lag_ms", "latency_ms", "ttft_ms", "freshness_s", "missed")

    def row(self) -> dict[str, Any]:
        """The CSV/JSON row: stored fields then derived ones."""
        d = dataclasses.asdict(self)
        for name in self.DERIVED:
            d[name] = getattr(self, name)
        return d

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RequestRecord:
        """Inverse of :meth:`row`; accepts CSV strings ('' = None) as well as typed values."""
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            typ = str(f.type)
            v = row.get(f.name)
            if v is None or v == "":
                if "None" in typ:
                    kwargs[f.name] = None
                elif f.default is not dataclasses.MISSING:
                    kwargs[f.name] = f.default
                else:
                    raise ValueError(f"row has no value for {f.name}")
            elif typ.startswith("int"):
                kwargs[f.name] = int(float(v))
            elif typ.startswith("float"):
                kwargs[f.name] = float(v)
            elif typ == "bool":
                kwargs[f.name] = v if isinstance(v, bool) else str(v).strip().lower() == "true"
            else:
                kwargs[f.name] = str(v)
        return cls(**kwargs)
