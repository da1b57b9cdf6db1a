"""The connection guard of ``opgen serve``: read deadlines and a cap on connections per client.

uvicorn alone gives a fresh connection no deadline (an idle or trickling client holds it forever)
and answers 503 to every client once ``limit_concurrency`` connections are open, so 300 idle
sockets from one client made ``/health`` answer 503 to all. Imported only when serving (it needs
uvicorn and h11).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr


class Guarded(H11Protocol):
    """uvicorn's h11 protocol, guarded (:func:`guarded_protocol` makes a subclass with the limits)."""

    limits: Any = None
    open_by: Counter[str] = Counter()
    _refused = False
    _timer: asyncio.TimerHandle | None = None
    _host = ""
    _in_body = False

    def connection_made(self, transport):  # type: ignore[override]
        addr = get_remote_addr(transport)
        self._host = addr[0] if addr else "?"
        if self.open_by[self._host] >= self.limits.max_connections_per_client or \
                sum(self.open_by.values()) >= self.limits.max_connections:
            self._refused = True
            transport.close()
            return
        self.open_by[self._host] += 1
        super().connection_made(transport)
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc):
        if self._refused:
            return
        self._release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:  # a request is in progress
            if self.conn.their_state is not h11.SEND_BODY:
                self._disarm()  # the request is whole: the app works on it, no deadline
            elif not self._in_body:
                self._in_body = True
                self._arm(self.limits.body_timeout_s)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._in_body = False
        self._arm(self.limits.header_timeout_s)  # the next request's headers, on a kept-alive connection

    def handle_websocket_upgrade(self, event) -> None:
        self._release()  # the WebSocket's own protocol takes the connection (pings, the app's idle limit)
        super().handle_websocket_upgrade(event)

    def _release(self) -> None:
        self._disarm()
        if self._host:
            self.open_by[self._host] -= 1
            if self.open_by[self._host] <= 0:
                del self.open_by[self._host]
            self._host = ""

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            self.transport.close()



def guarded_protocol(limits: Any) -> type[H11Protocol]:
    """uvicorn's h11 protocol with read deadlines and a cap on connections per client address.

    uvicorn alone gives a fresh connection no deadline (an idle or trickling client holds it
    forever) and answers 503 to everyone once ``limit_concurrency`` connections are open. Here a
    client has ``header_timeout_s`` from connecting (or from its last response) to send a request's
    headers and ``body_timeout_s`` more for the body, else the connection is closed; a client
    address holds at most ``max_connections_per_client`` connections (more are closed at once), so
    one client's idle sockets never crowd out another's."""
    return type("GuardedH11", (Guarded,), {"limits": limits, "open_by": Counter()})
