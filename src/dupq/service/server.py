"""``dupq serve``: open the collection, take the port and run uvicorn over :func:`~dupq.service.app.create_app`.

One worker serves in this process; several are started by :mod:`dupq.service.workers`, each with
its own copy of the model and the index, over the one listening socket taken here.

>>> serve("runs/faq", port=8000, workers=2)                               # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import tempfile
from collections.abc import Callable

from dupq.collection.location import Location
from dupq.core.errors import DupqError
from dupq.service import metrics
from dupq.service.app import create_app, open_collection
from dupq.service.auth import TOKEN_ENV, read_token, write_token
from dupq.service.connections import allow_many_connections, server_config
from dupq.service.refit import REFIT_EVERY
from dupq.service.workers import limit_blas, refuse_inherited_metrics, run_workers


def serve(
    collection_dir: str | os.PathLike,
    model_dir: str | os.PathLike | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    protect_reads: bool = False,
    threads: int = 1,
    log: Callable[[str], None] = print,
    workers: int = 1,
    refit_every: int = REFIT_EVERY,
) -> None:
    """Open the collection (a bad folder fails here, as one sentence) and serve it until stopped.

    ``workers`` processes serve it, each with its own copy of the model and the index (see
    :mod:`dupq.service.workers`); one is served in this process. ``threads`` is torch's and the
    BLAS's thread count for encoding (and FAISS's too with several workers): with searches batched there is one
    encoding call at a time, and on a small machine the event loop needs the other core. ``refit_every``:
    each worker refits the collection's calibration after that many decisions (:mod:`dupq.service.refit`).
    """
    import torch
    import uvicorn

    if workers < 1:
        raise DupqError(f"workers must be at least 1, not {workers}.")
    if workers > 1 and Location.parse(collection_dir).one_process:
        raise DupqError(
            f"{collection_dir} is a milvus-lite file, which one process opens at a time: serve it with "
            "--workers 1, or keep the collection on a Milvus server."
        )
    refuse_inherited_metrics()
    token = write_token()  # before the port is taken: a token no one should use is refused first
    readers = read_token(write=token)
    if threads:
        torch.set_num_threads(threads)
        limit_blas(threads)
    listener = listen(host, port)  # before anything is announced: a port in use fails here, as one sentence
    try:
        collection = open_collection(collection_dir, model_dir)
    except BaseException:
        listener.close()
        raise
    log(
        f"serving {len(collection):,} questions from {collection.location} on http://{host}:{port}/ "
        f"({workers} worker{'s' if workers > 1 else ''}; "
        f"writes {'need the bearer token' if token else f'disabled: set ${TOKEN_ENV}'}"
        f"{'; reads need the read or write token' if readers or protect_reads else ''})"
    )
    if workers > 1:
        collection.close()  # each worker opens its own
        os.environ[metrics.MULTIPROCESS_ENV] = tempfile.mkdtemp(prefix="dupq-metrics-")  # the workers' shared values
        factory = functools.partial(
            create_app,
            collection_dir,
            model_dir,
            token,
            protect_reads=protect_reads,
            read_token=readers,
            refit_every=refit_every,
        )
        try:
            run_workers(factory, listener, workers, threads)
        finally:
            listener.close()
            shutil.rmtree(os.environ.pop(metrics.MULTIPROCESS_ENV), ignore_errors=True)
        return
    app = create_app(collection, token=token, protect_reads=protect_reads, read_token=readers, refit_every=refit_every)
    allow_many_connections()
    uvicorn.Server(server_config(app)).run(sockets=[listener])


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, or a :class:`DupqError` saying why it cannot be."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise DupqError(
            f"cannot listen on {host}:{port} ({e.strerror or e}); is another server using that port?"
        ) from None
    return sock
