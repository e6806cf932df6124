"""``dupq dedup --ray ADDRESS``: the encoding and the search of a run as Ray tasks.

The driver (the machine that runs the command) streams the input, keeps the work folder and writes
the output exactly as on one machine (:mod:`dupq.dedup.run`); what it hands to the cluster is
the arithmetic:

* **encode**: chunks of texts, each a task that encodes them with the model (shipped once as the
  folder's bytes, so the nodes need dupq installed but not the model);
* **probe**: chunks of vectors, each a task that finds the lists they fall in (the k-means centroids
  are trained on the driver from a sample of 32 per list);
* **search**: blocks of queries taken in the order of their list, as on one machine; each task gets
  its queries and the vectors of exactly the lists they probe, builds the same inverted file over
  them (:func:`dupq.dedup.candidates.list_index`) and returns the judged duplicate pairs. A query
  sees the same lists as on one machine, so the groups are the same (up to the order of equal scores).

At most ``2 x`` the cluster's CPUs tasks are in flight, so the driver's memory stays bounded; results
are taken in order, so a killed run resumes from the last block recorded, as on one machine.
"""

from __future__ import annotations

import socket
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from dupq.core.errors import DupqError
from dupq.dedup.candidates import Corpus, Plan
from dupq.dedup.clusters import Edges
from dupq.dedup.grouping import DedupConfig, block_edges
from dupq.modeling.model import Model

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
    from dupq.dedup.candidates import probes

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

    def __init__(self, address: str):
        ray = _ray()
        _reachable(address, ray.util.get_node_ip_address)
        try:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise DupqError(f"cannot reach a Ray cluster at {address} ({str(e).splitlines()[0]}).") from None
        self.ray = ray
        self.inflight = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        self._remote = {f.__name__: ray.remote(f) for f in (_encode, _probes, _search)}

    def _model_ref(self, model: Model):
        if model.folder is None:
            raise DupqError("--ray needs a model saved in a folder, to ship it to the cluster.")
        files = {p.name: p.read_bytes() for p in Path(model.folder).iterdir() if p.is_file()}
        return self.ray.put(files), model.fingerprint()

    def _ordered(self, calls: Iterable) -> Iterator:
        """Results of ``(tag, submit)`` calls in order, with at most ``inflight`` running."""
        pending: deque = deque()
        for tag, submit in calls:
            pending.append((tag, submit()))
            if len(pending) >= self.inflight:
                t, ref = pending.popleft()
                yield t, self.ray.get(ref)
        while pending:
            t, ref = pending.popleft()
            yield t, self.ray.get(ref)

    def encode(self, model: Model, chunks: Iterable[tuple[int, list[str]]]) -> Iterator[tuple[int, np.ndarray]]:
        files, name = self._model_ref(model)
        run = self._remote["_encode"].remote
        yield from self._ordered((lo, lambda t=texts: run(files, name, t)) for lo, texts in chunks)

    def probes(self, vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray:
        run, ref = self._remote["_probes"].remote, self.ray.put(centroids)
        out = np.empty((len(vectors), min(nprobe, len(centroids))), dtype=np.int32)
        calls = (
            (lo, lambda lo=lo: run(np.asarray(vectors[lo : lo + 65_536]), ref, nprobe))
            for lo in range(0, len(vectors), 65_536)
        )
        for lo, p in self._ordered(calls):
            out[lo : lo + len(p)] = p
        return out

    def search(
        self, model: Model, config: DedupConfig, vectors: np.ndarray, searched: Plan, start: int
    ) -> Iterator[tuple[int, Edges]]:
        """The plan's blocks as tasks: each gets its queries and what they are searched among (every question,
        put once; or the vectors of the lists its queries probe)."""
        files, name = self._model_ref(model)
        t, k, run = config.threshold_for(model), searched.k, self._remote["_search"].remote
        everything = self.ray.put(np.asarray(vectors)) if searched.centroids is None else None
        centroids = None if searched.centroids is None else self.ray.put(searched.centroids)

        def task(rows):
            queries, probed = vectors[rows], searched.probes_of(rows)
            if everything is not None:
                return run(files, name, t, config.on, k, rows, queries, probed, everything, None, None, None)
            part = searched.corpus(vectors, rows)
            return run(
                files, name, t, config.on, k, rows, queries, probed, part.vectors, part.ids, part.lists, centroids
            )

        yield from self._ordered((number, lambda rows=rows: task(rows)) for number, rows in searched.blocks(start))
