"""``dupq dedup --ray ADDRESS``: the encoding and the search of a run as Ray tasks.

The driver streams the input, keeps the work folder and writes the output as on one machine (:mod:`dupq.dedup.run`); the
cluster gets the arithmetic: **encode** (chunks of texts; the model shipped once as the folder's bytes), **probe**
(chunks of vectors against the centroids trained on the driver from 32 a list) and **search** (blocks of queries in list
order, each task given the vectors of exactly the lists its queries probe, :func:`dupq.dedup.candidates.list_index`), so
the groups are the same as on one machine (up to the order of equal scores).

At most ``2 x`` the cluster's CPUs tasks are in flight and results are taken in order, so memory stays bounded and a
killed run resumes from the last block. A cluster that dies mid-run is noticed within seconds (:meth:`RayEngine.watch`):
one ``error:`` sentence, exit 2, the work folder kept.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dupq.core.errors import DupqError
from dupq.dedup.candidates import Corpus, Plan, probes
from dupq.dedup.clusters import Edges
from dupq.dedup.engine import interrupted
from dupq.dedup.grouping import DedupConfig, block_edges
from dupq.modeling.model import Model

WATCH = 2.0  # seconds between two checks that the cluster still answers, while a result is awaited
_MODELS: dict[str, Model] = {}  # one loaded model per worker process, by the bytes' fingerprint


def _ray():
    try:
        import ray
    except ImportError:
        raise DupqError("--ray needs Ray: pip install 'dupq[ray]'.") from None
    return ray


def _model(files: dict[str, bytes], name: str) -> Model:
    """The model whose folder's files are ``files``, written to a temporary folder once per worker."""
    if name not in _MODELS:
        folder = Path(tempfile.mkdtemp(prefix="dupq-model-"))
        for file, data in files.items():
            (folder / file).write_bytes(data)
        _MODELS[name] = Model.load(folder)
    return _MODELS[name]


def _encode(files, name, texts):
    return _model(files, name).encode(texts)


def _probes(vectors, centroids, nprobe):

    return probes(vectors, centroids, nprobe)


def _search(files, name, threshold, on, k, rows, queries, query_probes, corpus, corpus_ids, corpus_lists, centroids):
    """:func:`~dupq.dedup.grouping.block_edges` on a worker, the model loaded once there."""
    where = Corpus(corpus, corpus_ids, corpus_lists, centroids)
    return block_edges(_model(files, name), threshold, on, k, rows, queries, query_probes, where)


def _listens(host: str, port: int, timeout: float) -> OSError | None:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return e
    return None


def _reachable(address: str, node_ip: Callable[[], str], timeout: float = 10.0) -> None:
    """Refuse a ``HOST:PORT`` where nothing listens in one sentence (Ray itself retries for minutes).

    Ray dials this machine's own address (``node_ip()``) in place of 127.0.0.1 or localhost, unless
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: a cluster that listens on the loopback address alone is
    then out of its reach, which is checked here too rather than found minutes later."""
    host, _, port = address.rpartition(":")
    if "://" in address or not port.isdigit():
        return  # auto, ray://...: Ray finds or reaches the cluster itself
    error = _listens(host, int(port), timeout)
    if error is not None:
        raise DupqError(f"cannot reach a Ray cluster at {address} ({error.strerror or error}).")
    dialled = node_ip() if host in ("127.0.0.1", "localhost") else host
    if dialled != host and _listens(dialled, int(port), timeout) is not None:
        raise DupqError(
            f"the Ray cluster at {address} listens on the loopback address only, and Ray dials this machine's "
            f"address {dialled} in its place: set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 for both, or start the "
            "cluster on the machine's address."
        )


class RayEngine:
    """The heavy stages of a run on the Ray cluster at ``address`` (``HOST:PORT``, ``ray://...`` or ``auto``)."""

    reranks = False  # a reranker (a transformer's folder) is not shipped to the nodes: a reranked run is refused

    def __init__(self, address: str):
        ray = _ray()
        _reachable(address, ray.util.get_node_ip_address)
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise DupqError(f"cannot reach a Ray cluster at {address} ({str(e).splitlines()[0]}).") from None
        self.ray, self.address = ray, address
        self.gcs = ray.get_runtime_context().gcs_address  # HOST:PORT of the cluster's control store
        self.inflight = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        self._remote = {f.__name__: ray.remote(f) for f in (_encode, _probes, _search)}

    def _lost(self, why: str) -> DupqError:
        return DupqError(f"the Ray cluster at {self.address} stopped answering during the run ({why})")

    @contextmanager
    def watch(self, work: Path) -> Iterator[None]:
        """While the run uses the cluster, check every :data:`WATCH` seconds that its control store (GCS) listens.

        When it stops, the run ends at once with one sentence and exit status 2 (``work`` kept, as a kill keeps
        it): the main thread may be waiting inside Ray's client, which would retry for a minute and then abort
        the process with its own fatal log, and which no exception can reach."""
        host, _, port = self.gcs.rpartition(":")
        done = threading.Event()

        def check() -> None:
            while not done.wait(WATCH):
                error = _listens(host, int(port), WATCH)
                if error is not None and not done.is_set():
                    why = f"{self.gcs}: {error.strerror or error}"
                    sys.stderr.write(f"error: {interrupted(str(self._lost(why)), work)}\n")
                    sys.stderr.flush()
                    os._exit(2)

        thread = threading.Thread(target=check, name="dupq-ray-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()

    def _get(self, ref):
        """A task's result; a task lost with its node (not one that raised) is :meth:`_lost`."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError:
            raise  # a bug in the task itself: its traceback is the report
        except self.ray.exceptions.RayError as e:
            raise self._lost(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__) from None

    def _put(self, value):
        try:
            return self.ray.put(value)
        except self.ray.exceptions.RayError as e:
            raise self._lost(type(e).__name__) from None

    def _model_ref(self, model: Model):
        if model.folder is None:
            raise DupqError("--ray needs a model saved in a folder, to ship it to the cluster.")
        files = {p.name: p.read_bytes() for p in Path(model.folder).iterdir() if p.is_file()}
        return self._put(files), model.fingerprint()

    def _ordered(self, calls: Iterable) -> Iterator:
        """Results of ``(tag, submit)`` calls in order, with at most ``inflight`` running."""
        pending: deque = deque()
        for tag, submit in calls:
            pending.append((tag, submit()))
            if len(pending) >= self.inflight:
                t, ref = pending.popleft()
                yield t, self._get(ref)
        while pending:
            t, ref = pending.popleft()
            yield t, self._get(ref)

    def encode(self, model: Model, chunks: Iterable[tuple[int, list[str]]]) -> Iterator[tuple[int, np.ndarray]]:
        files, name = self._model_ref(model)
        run = self._remote["_encode"].remote
        yield from self._ordered((lo, lambda t=texts: run(files, name, t)) for lo, texts in chunks)

    def probes(self, vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray:
        run, ref = self._remote["_probes"].remote, self._put(centroids)
        out = np.empty((len(vectors), min(nprobe, len(centroids))), dtype=np.int32)
        calls = (
            (lo, lambda lo=lo: run(np.asarray(vectors[lo : lo + 65_536]), ref, nprobe))
            for lo in range(0, len(vectors), 65_536)
        )
        for lo, p in self._ordered(calls):
            out[lo : lo + len(p)] = p
        return out

    def search(
        self,
        model: Model,
        config: DedupConfig,
        vectors: np.ndarray,
        searched: Plan,
        start: int,
        reranked: np.ndarray | None = None,
    ) -> Iterator[tuple[int, Edges]]:
        """The plan's blocks as tasks: each gets its queries and what they are searched among (every question,
        put once; or the vectors of the lists its queries probe)."""
        files, name = self._model_ref(model)
        t, k, run = config.threshold_for(model), searched.k, self._remote["_search"].remote
        everything = self._put(np.asarray(vectors)) if searched.centroids is None else None
        centroids = None if searched.centroids is None else self._put(searched.centroids)

        def task(rows):
            queries, probed = vectors[rows], searched.probes_of(rows)
            if everything is not None:
                return run(files, name, t, config.on, k, rows, queries, probed, everything, None, None, None)
            part = searched.corpus(vectors, rows)
            return run(
                files, name, t, config.on, k, rows, queries, probed, part.vectors, part.ids, part.lists, centroids
            )

        yield from self._ordered((number, lambda rows=rows: task(rows)) for number, rows in searched.blocks(start))
