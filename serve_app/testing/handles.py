"""Fake Serve handles, the one set (tests; Ray-free): ``handle.options(stream=...).method.remote(*args)``.

:class:`FakeHandle` stands in for a ``DeploymentHandle`` in front of any object (a real deployment
class, as ``tests/inprocess.py`` builds the graph, or a :class:`ScriptedGraph`): every value that
crosses it is pickled and unpickled, as Ray would, so a value that cannot cross a real handle fails
here too. A call returns a :class:`FakeResponse` (``DeploymentResponse``: awaited, or passed on as
its "object ref") or, with ``stream=True``, a :class:`FakeGenerator` (``DeploymentResponseGenerator``);
both record their cancellation, and the handle records every call (:attr:`FakeHandle.sent`,
:attr:`FakeHandle.calls`).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator, Awaitable, Coroutine, Generator, Iterable
from typing import Any


def crossed(value: Any) -> Any:
    """``value`` as the other side of a handle sees it (pickled and unpickled)."""
    return pickle.loads(pickle.dumps(value))


class FakeResponse:
    """Stands in for ``DeploymentResponse``: a task, awaited or passed on as its "object ref"."""

    def __init__(self, coro: Coroutine[Any, Any, Any]):
        self._task = asyncio.ensure_future(coro)
        self.cancelled = False

    async def _to_object_ref(self) -> Any:
        return crossed(await self._task)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._to_object_ref().__await__()

    def cancel(self) -> None:
        self.cancelled = True
        self._task.cancel()


class FakeGenerator:
    """Stands in for ``DeploymentResponseGenerator``: an async generator's items, crossed.

    Attributes:
        cancelled: :meth:`cancel` was called.
        ended: the generator returned (its end was read).
        ended_before_cancel: whether it had ended when :meth:`cancel` was first called (None: never cancelled).
    """

    def __init__(self, agen: AsyncIterator[Any]):
        self._agen = agen
        self._closing: asyncio.Future[Any] | None = None
        self.cancelled = False
        self.ended = False
        self.ended_before_cancel: bool | None = None

    def __aiter__(self) -> FakeGenerator:
        return self

    async def __anext__(self) -> Any:
        try:
            return crossed(await self._agen.__anext__())
        except StopAsyncIteration:
            self.ended = True
            raise

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled, self.ended_before_cancel = True, self.ended
        aclose = getattr(self._agen, "aclose", None)
        if aclose is not None and self._closing is None:
            self._closing = asyncio.ensure_future(aclose())


class FakeHandle:
    """Stands in for ``DeploymentHandle`` in front of ``target``: ``handle.options(stream=...).method.remote(*args)``.

    Attributes:
        sent: every call, ``(method name, *crossed args)``, shared with the handle's ``options`` copies.
        calls: every call's :class:`FakeResponse` or :class:`FakeGenerator`, in order (shared too).
    """

    def __init__(self, target: Any, stream: bool = False, *, _sent: list[tuple[Any, ...]] | None = None,
                 _calls: list[FakeResponse | FakeGenerator] | None = None):
        self._target = target
        self._stream = stream
        self.sent: list[tuple[Any, ...]] = [] if _sent is None else _sent
        self.calls: list[FakeResponse | FakeGenerator] = [] if _calls is None else _calls

    def options(self, *, stream: bool = False, **_: Any) -> FakeHandle:
        return FakeHandle(self._target, stream, _sent=self.sent, _calls=self.calls)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._target, name)
        handle = self

        class _Method:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> FakeResponse | FakeGenerator:
                args, kwargs = crossed(args), crossed(kwargs)
                handle.sent.append((name, *args))
                result = method(*args, **kwargs)
                call = FakeGenerator(result) if handle._stream else FakeResponse(result)
                handle.calls.append(call)
                return call

        return _Method

    @property
    def streams(self) -> list[FakeGenerator]:
        """The streamed calls' generators, in order."""
        return [c for c in self.calls if isinstance(c, FakeGenerator)]

    @property
    def responses(self) -> list[FakeResponse]:
        """The plain calls' responses, in order."""
        return [c for c in self.calls if isinstance(c, FakeResponse)]


class ScriptedGraph:
    """A scripted decoder and model behind one :class:`FakeHandle` (``decode`` and ``generate``).

    Args:
        result: what ``decode`` returns (the clip, or an error value).
        raises: what ``decode`` raises instead, or None.
        hang: ``decode`` never returns.
        chunks: what ``generate`` yields, in order; an exception in it is raised there.
        gap_s: seconds before each chunk.
        open_after: ``generate`` stays open (never returns) after its last chunk.
    """

    def __init__(self, result: Any = None, *, raises: BaseException | None = None, hang: bool = False,
                 chunks: Iterable[Any] = (), gap_s: float = 0.0, open_after: bool = False):
        self.result, self.raises, self.hang = result, raises, hang
        self.chunks, self.gap_s, self.open_after = list(chunks), gap_s, open_after

    async def decode(self, source: Any, sample: Any, request_id: str) -> Any:
        if self.hang:
            await asyncio.sleep(3600)
        if self.raises is not None:
            raise self.raises
        return self.result

    async def generate(self, question: Any, clip: Any) -> AsyncIterator[Any]:
        for item in self.chunks:
            await asyncio.sleep(self.gap_s)
            if isinstance(item, BaseException):
                raise item
            yield item
        if self.open_after:
            await asyncio.sleep(3600)


async def construct(cls: Any, *args: Any) -> Any:
    """An instance of ``cls`` built as Serve builds a replica: ``__init__`` called, and awaited when async."""
    obj: Any = cls.__new__(cls)
    result: Awaitable[None] | None = obj.__init__(*args)
    if asyncio.iscoroutine(result):
        await result
    return obj
