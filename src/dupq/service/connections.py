"""How the service holds its TCP connections: a deadline for every request's headers, and room for many.

uvicorn closes a keep-alive connection idle ``timeout_keep_alive`` seconds after an answer, but nothing closes one that
never sends a request or trickles its headers a byte at a time; a thousand such sockets use up the file descriptors and
lock everyone out. So here a connection must deliver a request's headers within :data:`HEADER_TIMEOUT` seconds of
opening or of its previous answer; an idle keep-alive connection is closed :data:`KEEP_ALIVE` seconds after its last
answer; ``dupq serve`` raises its soft limit of open files to the hard limit; and uvicorn's own 400 (which the app never
sees) carries the security headers too.

>>> uvicorn.Server(server_config(app)).run(sockets=[listener])  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import resource

from dupq.service.middleware import SECURITY_HEADERS

HEADER_TIMEOUT = 10.0  # seconds a connection has to send a request's headers (from opening, or its last answer)
KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open after an answer
OPEN_FILES = 65_536  # the soft limit of open files asked for when the hard limit is unlimited


class HeaderDeadline:
    """A mixin for uvicorn's HTTP protocols: close a connection whose request headers do not arrive in time.

    The deadline is armed when the connection opens and after each answer; it does nothing when
    it fires while a request is being answered (its headers came in time). The protocol's own 400
    for a request it cannot parse gets the security headers here, since the app never sees it.
    """

    header_timeout = HEADER_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request it cannot parse, with the security headers of every other answer."""
        body = msg.encode("ascii", "replace")
        head = [b"HTTP/1.1 400 Bad Request", *(name + b": " + value for name, value in SECURITY_HEADERS)]
        head += [b"content-type: text/plain; charset=utf-8", b"content-length: %d" % len(body), b"connection: close"]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()

    def _headers_late(self) -> None:
        self._deadline = None
        answering = self.cycle is not None and not self.cycle.response_complete
        if not answering and not self.transport.is_closing():
            self.transport.close()


def protocol(header_timeout: float = HEADER_TIMEOUT) -> type:
    """uvicorn's HTTP protocol (httptools where installed, as uvicorn's "auto" picks, else h11) with :class:`HeaderDeadline`."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # httptools is optional
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return type(f"Deadline{base.__name__}", (HeaderDeadline, base), {"header_timeout": header_timeout})


def server_config(app, header_timeout: float = HEADER_TIMEOUT, **kwargs):
    """The ``uvicorn.Config`` the service runs under (``dupq serve``, and the tests' live server)."""
    import uvicorn

    kwargs.setdefault("log_level", "warning")
    return uvicorn.Config(app, timeout_keep_alive=KEEP_ALIVE, http=protocol(header_timeout), **kwargs)


def allow_many_connections() -> int:
    """Raise this process's soft limit of open files to the hard limit (or :data:`OPEN_FILES`); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # a container may refuse; the deadlines still free sockets
            pass
    return soft


# The protocol at the default deadline, by name: spawned workers get it as "module:name", a class a
# process can import, where a class made at run time could not be sent to them.
DeadlineHTTP = protocol()
DeadlineHTTP.__name__ = DeadlineHTTP.__qualname__ = "DeadlineHTTP"
