"""A client that went away reaches the routes as an ``http.disconnect`` message, never an exception."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class DisconnectAsEnd:
    """ASGI middleware: a client that went away is an ``http.disconnect`` message, never an exception.

    Ray Serve's replica reads a request's ASGI messages from its proxy; once the client has gone the
    proxy cancels that read, and the replica's ``receive()`` raises Ray's ``TaskCancelledError``
    instead of returning ``http.disconnect``. Starlette's event streams (which listen for the
    disconnect) and body reads then failed with it: closing many event subscriptions logged
    ``ERROR … Request failed`` with ``TaskCancelledError`` tracebacks and "Future exception was never
    retrieved"; a body cut off by its client could be a 500. Here those errors become the disconnect
    message, which Starlette handles as the normal end it is (an event stream stops, a body read
    raises ``ClientDisconnect``: 499).

    Args:
        app: the wrapped ASGI app.
        disconnect_errors: exception types a ``receive()`` raises for a client that went away
            (the ingress passes Ray's ``TaskCancelledError``).
    """

    def __init__(self, app: ASGIApp, disconnect_errors: tuple[type[BaseException], ...]):
        self.app = app
        self.errors = disconnect_errors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.errors:
            await self.app(scope, receive, send)
            return
        gone = False

        async def receive_or_disconnect() -> Message:
            nonlocal gone
            if gone:
                return {"type": "http.disconnect"}
            try:
                return await receive()
            except self.errors:
                gone = True
                return {"type": "http.disconnect"}

        await self.app(scope, receive_or_disconnect, send)
