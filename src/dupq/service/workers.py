"""Several worker processes serving one collection over one listening socket (``dupq serve --workers N``).

One process answers at the speed of one core (tokenising, validation, JSON and the hits hold the GIL). With ``N``
workers the parent binds the socket (a port in use fails before anything starts) and uvicorn's ``Multiprocess``
supervisor starts ``N`` *spawned* children that accept on it (torch's and OpenMP's thread pools and SQLite connections
must not cross a fork), restarts one that dies or stops answering its health check, and stops them all on SIGINT or
SIGTERM.

Each worker opens the collection itself; the store is the one truth they share, and before every search a worker catches
its index up with the others' committed writes. A worker that dies is noticed within :data:`ALIVE_CHECK_S` and replaced
at once, even during a health check (uvicorn's own wait would last :data:`HEALTH_CHECK_S`); its live-process gauges are
dropped from the metrics, its counts kept. A worker whose parent disappears shuts itself down (no orphan keeps the
port). A worker that cannot open the collection logs one sentence (:class:`StartupSentence`) and exits as failed to
start; the supervisor then stops them all and ``dupq serve`` ends with one ``error:``.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable

from dupq.core.errors import DupqError
from dupq.service.connections import KEEP_ALIVE, allow_many_connections

PARENT_CHECK_S = 0.5  # how often a worker checks that its supervisor is still there
ALIVE_CHECK_S = 0.25  # how often the supervisor, waiting for a worker's answer, checks that it has not died
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's folder of every process's values
HEALTH_CHECK_S = 60  # a worker that does not answer the supervisor's ping for this long is restarted (a
# busy worker answers late on a loaded machine, and opening a large collection takes seconds)


def default_workers(location) -> int:
    """One worker per core (each runs its searches on one core); one for a milvus-lite file, which
    one process opens at a time."""
    from dupq.collection.location import Location

    return 1 if Location.parse(location).one_process else os.cpu_count() or 1


def refuse_inherited_metrics() -> None:
    """Refuse a ``$PROMETHEUS_MULTIPROC_DIR`` that ``dupq serve`` would inherit (left in a shell, or another server's).

    prometheus-client reads it when imported, so a single process would write into that folder and
    sum the old values in it with its own (or fail if it is gone), and ``dupq serve`` gives its
    workers a new folder of its own anyway. Called before the metrics are imported.
    """
    for name in (MULTIPROCESS_ENV, MULTIPROCESS_ENV.lower()):  # prometheus-client reads either
        if os.environ.get(name):
            raise DupqError(
                f"${name} is set (to {os.environ[name]}), and dupq serve would mix that folder's old metrics into "
                "its own: unset it (dupq serve gives its workers a metrics folder of its own)."
            )


def worker_app(factory: Callable[[], object], threads: int, parent: int):
    """In a worker: one thread each for torch and FAISS (the workers are the parallelism), a watch on
    the ``parent`` process, then the app ``factory()`` makes."""
    set_threads(threads)
    threading.Thread(target=_stop_without, args=(parent,), name="dupq-parent-watch", daemon=True).start()
    return StartupSentence(factory())


class StartupSentence:
    """An ASGI app whose failed startup says one sentence: a :class:`~dupq.core.errors.DupqError` of
    its lifespan (the collection cannot be opened) is logged as its message, not as Starlette's
    traceback; any other failure keeps its traceback (a bug)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        held = []

        async def holding(message):  # a failure is held until the exception that caused it is known
            if message["type"] == "lifespan.startup.failed":
                held.append(message)
            else:
                await send(message)

        try:
            await self.app(scope, receive, holding)
        except DupqError as e:
            if held:
                await send({**held[0], "message": f"worker {os.getpid()} cannot start: {e}"})
                return
            raise
        except BaseException:
            if held:
                await send(held[0])
            raise
        if held:
            await send(held[0])


def set_threads(threads: int) -> None:
    """torch's, FAISS's and the BLAS's thread counts (0: leave their defaults)."""
    if threads:
        import faiss
        import torch

        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
        limit_blas(threads)


def with_these_threads(fn: Callable) -> Callable:
    """``fn``, which will run in a worker thread, with the OpenMP thread count (FAISS's, and its BLAS's) of the
    thread calling this.

    OpenMP keeps its count per thread: :func:`set_threads` sets it for the thread that starts the
    app, and a search answered in another thread would walk the HNSW graph with every core's
    threads, whose spinning took the other workers' cores (the service's CPU per search doubled).
    """
    import faiss

    threads = faiss.omp_get_max_threads()

    def run(*args, **kwargs):
        faiss.omp_set_num_threads(threads)  # this thread's own count; a few hundred nanoseconds
        return fn(*args, **kwargs)

    return run


def limit_blas(threads: int) -> None:
    """At most ``threads`` threads in each BLAS library loaded (NumPy's OpenBLAS among them).

    The search's NumPy forward passes (:mod:`dupq.modeling.kernels`) multiply through NumPy's BLAS,
    whose idle threads spin on a core for a while after each product: with a worker per core they
    take the other workers' cores, and in one process the event loop's.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads, user_api="blas")


def _stop_without(parent: int) -> None:
    """SIGTERM this worker (uvicorn's graceful shutdown: the collection is closed) once ``parent`` has gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)


def run_workers(factory: Callable[[], object], listener, workers: int, threads: int = 1) -> None:
    """Serve the app of ``factory`` (picklable: it is sent to each spawned worker) from ``workers``
    processes accepting on ``listener``, until SIGINT or SIGTERM."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config(
        functools.partial(worker_app, factory, threads, os.getpid()),
        factory=True,
        workers=workers,
        log_level="info",  # each worker says when it has started ("Application startup complete") and stopped
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE,
        http="dupq.service.connections:DeadlineHTTP",  # every request's headers in time, as in one process
        timeout_worker_healthcheck=HEALTH_CHECK_S,
    )
    allow_many_connections()  # the workers inherit the raised limit of open files
    supervisor = supervisor_class(Multiprocess)(config, sockets=[listener])
    supervisor.run()
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        raise DupqError("a worker could not start (its sentence is above), so the server stopped every worker.")


def supervisor_class(base: type) -> type:
    """uvicorn's supervisor ``base`` (``Multiprocess``), which also notices a worker that dies during a health check
    at once, and forgets the values of a dead worker's live gauges in the metrics folder."""

    class Supervisor(base):
        def keep_subprocess_alive(self) -> None:
            for process in self.processes:
                watch(process)
            before = {process.pid for process in self.processes}
            super().keep_subprocess_alive()
            for pid in before - {process.pid for process in self.processes}:
                forget_worker(pid)

    return Supervisor


def watch(process) -> None:
    """Make ``process`` (uvicorn's ``Process``) answer ``ping`` False as soon as its worker has died, not after the
    whole timeout: its pipe stays open in the supervisor, so the wait for a dead worker's answer would not end."""
    if getattr(process, "_dupq_watched", False):
        return

    def ping(timeout: float = 5) -> bool:
        deadline = time.monotonic() + timeout
        try:
            process.parent_conn.send(b"ping")
            while time.monotonic() < deadline:
                if process.parent_conn.poll(min(ALIVE_CHECK_S, max(0.0, deadline - time.monotonic()))):
                    process.parent_conn.recv()
                    return True
                if not process.process.is_alive():
                    return False
        except (OSError, EOFError, pickle.UnpicklingError):
            return False
        return False

    process.ping, process._dupq_watched = ping, True


def forget_worker(pid: int | None) -> None:
    """Drop the dead worker ``pid``'s live gauges from the metrics folder (prometheus-client's ``mark_process_dead``)."""
    if pid is not None and os.environ.get(MULTIPROCESS_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
