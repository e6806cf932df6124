"""Connections to a PostgreSQL collection's server: a small pool per process, and one sentence for every failure.

:class:`Connections` hands a backend's reads and writes a connection with pgvector's type registered, keeps a
few idle ones, and retries a read once on a fresh connection (a restarted server costs no error). Every
error of the server or the network becomes one :class:`~dupq.core.errors.DupqError` sentence (a
:class:`~dupq.collection.rows.StoreFailure` where retrying can help), the password never in it.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from dupq.collection.postgres.address import Address, scrub
from dupq.collection.rows import StoreFailure
from dupq.core.errors import DupqError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10  # seconds to wait for the server on connecting
KEPT_CONNECTIONS = 8  # idle connections a process keeps (one per search thread in use)


def psycopg_modules():
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError:
        raise DupqError("the Postgres store needs psycopg and pgvector: pip install 'dupq[postgres]'.") from None
    return psycopg, register_vector


def _reason(e: Exception, where: Address) -> str:
    message = " ".join(str(e).split()) or type(e).__name__
    return scrub(message, where)[:300]


def failure(doing: str, where: Address, e: Exception) -> DupqError:
    """A psycopg error as one sentence naming what failed and where (never the password), with its reason.

    A lost or refused connection is ``"unreachable"`` (the service's 503 with Retry-After); a lock or serialisation
    conflict ``"busy"``; a full disk ``"full"``; a value Postgres cannot hold (a NUL character) the caller's mistake.
    """
    import psycopg

    reason = _reason(e, where)
    if isinstance(e, psycopg.OperationalError) and "password" in reason:
        return DupqError(f"cannot connect to Postgres at {where.text}: the password is wrong or missing ({reason}).")
    if isinstance(e, psycopg.DataError):
        return DupqError(f"cannot {doing} {where.text}: Postgres cannot hold the value given ({reason}).")
    state = getattr(e, "sqlstate", None) or ""
    if state == "53100":
        return StoreFailure(f"cannot {doing} {where.text}: the database's disk is full ({reason}).", "full")
    if state in ("40001", "40P01", "55P03", "53300"):
        return StoreFailure(f"cannot {doing} {where.text}: the database is busy; try again ({reason}).", "busy")
    if state == "25006":
        return StoreFailure(f"cannot {doing} {where.text}: the database is read-only ({reason}).", "read-only")
    if isinstance(e, psycopg.OperationalError) or state.startswith(("08", "57P")):
        return StoreFailure(f"cannot {doing} {where.text}: the server is unreachable ({reason}).", "unreachable")
    return StoreFailure(f"cannot {doing} {where.text} ({reason}).", "failed")


class Connections:
    """This process's connections to one database, each handed to one thread at a time.

    A connection the server dropped (a restart, a failover) is thrown away; a read that fails on
    a kept connection is tried once more on a new one.
    """

    def __init__(self, where: Address):
        self.where = where
        self._idle: list = []
        self._lock = threading.Lock()
        self._closed = False

    def connect(self, vector: bool = True):
        psycopg, register_vector = psycopg_modules()
        try:
            conn = psycopg.connect(self.where.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        except psycopg.Error as e:
            raise failure("connect to", self.where, e) from None
        except Exception as e:  # noqa: BLE001 -- a malformed URI is libpq's ProgrammingError or a ValueError
            raise DupqError(f"cannot connect to Postgres at {self.where.text} ({_reason(e, self.where)}).") from None
        if vector:
            try:
                register_vector(conn)
            except psycopg.ProgrammingError:
                conn.close()
                raise DupqError(
                    f"the database at {self.where.text} lacks the pgvector extension; "
                    "install it there (CREATE EXTENSION vector) and try again."
                ) from None
            except psycopg.Error as e:
                conn.close()
                raise failure("connect to", self.where, e) from None
        conn.dupq_ef = None  # the hnsw.ef_search this connection's session has (None: the server's default)
        return conn

    @contextlib.contextmanager
    def get(self):
        with self._lock:
            if self._closed:
                raise StoreFailure(f"the collection {self.where.text} is closed.", "unreachable")
            conn = self._idle.pop() if self._idle else None
        conn = conn or self.connect()
        try:
            yield conn
        except DupqError:
            self._put(conn)  # the caller's mistake, its transaction rolled back: the connection is sound
            raise
        except BaseException:
            conn.close()  # in doubt (a failed statement, an interrupted transaction): never reused
            raise
        self._put(conn)

    def _put(self, conn) -> None:
        with self._lock:
            if self._closed or len(self._idle) >= KEPT_CONNECTIONS or conn.closed:
                conn.close()
            else:
                self._idle.append(conn)

    def run(self, doing: str, fn, retry: bool = False):
        """``fn(connection)``, a database error as one sentence; ``retry``: a read, tried once more on a new connection
        when its kept connection was dropped."""
        import psycopg

        for attempt in (0, 1):
            try:
                with self.get() as conn:
                    return fn(conn)
            except psycopg.OperationalError as e:
                if retry and attempt == 0:
                    continue
                raise failure(doing, self.where, e) from None
            except psycopg.Error as e:
                raise failure(doing, self.where, e) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def ensure_vector(conn, where: Address) -> None:
    """Create the pgvector extension where it is missing, or say in one sentence why it cannot be."""
    import psycopg

    try:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            return
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as e:
        raise DupqError(
            f"the database at {where.text} lacks the pgvector extension and it cannot be created here "
            f"({_reason(e, where)}); install pgvector on the server, or ask its owner to run CREATE EXTENSION vector."
        ) from None
