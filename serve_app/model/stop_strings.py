"""Stop strings over a stream of text deltas, with vLLM's semantics (pure).

vLLM (``SamplingParams.stop``, ``include_stop_str_in_output=False``): generation stops as soon as
one of the strings appears in the generated text, the output ends right before it (the string
itself is not returned) and the finish reason is ``stop``. Streaming, vLLM holds back the last
``len(longest stop) - 1`` characters of the text until they can no longer begin a stop string, so
a client never sees part of one. The text searched is the whole generated text (for
Cosmos-Reason1 that includes the ``<think>`` reasoning; vLLM has no notion of it).
"""

from __future__ import annotations

from collections.abc import Sequence


class StopScanner:
    """Cuts a stream of text at the first stop string (see the module docstring).

    :meth:`feed` each delta and send what it returns; once :attr:`stopped` is true the answer is
    over (what came after the stop string is dropped). At the end of a generation that never hit a
    stop string, :meth:`flush` returns the text held back.

    Args:
        stops: the stop strings (non-empty strings; an empty sequence stops nothing).
    """

    def __init__(self, stops: Sequence[str]):
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        self.stops = tuple(stops)
        self.stopped = False
        self.matched: str | None = None
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self._pending = ""

    def feed(self, text: str) -> str:
        """The part of ``text`` (after what was held back) that can be sent now.

        A stop string found ends the answer: the text before it is returned, :attr:`stopped` and
        :attr:`matched` are set, and later calls return ``""``. Of several stop strings found in
        one delta, the one that ends first wins (the one a token-by-token check would meet first).
        """
        if self.stopped:
            return ""
        buf = self._pending + text
        hit: tuple[int, int, str] | None = None  # (end, start, stop)
        for stop in self.stops:
            start = buf.find(stop)
            if start >= 0 and (hit is None or (start + len(stop), start) < hit[:2]):
                hit = (start + len(stop), start, stop)
        if hit is not None:
            self.stopped, self.matched, self._pending = True, hit[2], ""
            return buf[: hit[1]]
        # Text that ends more than len(longest)-1 characters before the end cannot begin a stop string
        # that is still to be completed: a stop starting there would lie wholly inside buf, and was not found.
        cut = max(0, len(buf) - self._hold)
        self._pending = buf[cut:]
        return buf[:cut]

    def flush(self) -> str:
        """The text held back (the generation ended without a stop string); ``""`` once stopped."""
        out, self._pending = self._pending, ""
        return "" if self.stopped else out
