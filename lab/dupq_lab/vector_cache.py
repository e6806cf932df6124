"""A lab run's cache of an encoder's vectors by the digest of their text, so that a measurement encodes each text once.

:class:`DigestCache` keeps ``(digest, vector)`` chunks in a folder (one ``.npz`` file per chunk,
written through a rename as it is encoded, so a killed run keeps what it finished); any ``.npz``
file of ``digests`` and ``vectors`` found there counts (vectors of the same model encoded
elsewhere). :func:`cached` has a model encode through it. The product stores a reranker's vectors
in the collection; this cache is the lab's alone (it also spares the queries a second encoding).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dupq.collection.rows import text_digest
from dupq.core.files import atomic_output
from dupq.modeling.model import Model

CHUNK = 2_048  # texts encoded and written to the cache at a time


class DigestCache:
    """``model``'s unit vectors kept in ``folder`` by the digest of their text; ``encoded``: how many this process
    encoded. Calling it encodes what is missing (stderr tells how far and the ETA) and returns every vector."""

    def __init__(self, model: Model, folder: Path, encode=None):
        self.model, self.folder, self.encoded = model, folder, 0
        self._encode = encode or model.encode
        folder.mkdir(parents=True, exist_ok=True)
        self.vectors: dict[str, np.ndarray] = {}
        for path in sorted(folder.glob("*.npz")):
            with np.load(path) as chunk:
                self.vectors.update(zip(chunk["digests"].tolist(), chunk["vectors"]))

    def __call__(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        """``(N, d')`` unit vectors of ``texts``: stored ones read, the others encoded and stored."""
        digests = [text_digest(t) for t in texts]
        missing = list({d: t for d, t in zip(digests, texts) if d not in self.vectors}.items())
        started = time.perf_counter()
        for lo in range(0, len(missing), CHUNK):
            part = missing[lo : lo + CHUNK]
            vectors = self._encode([t for _, t in part])  # (C, d')
            with atomic_output(self.folder / f"{len(self.vectors):08d}-{len(part)}.npz") as f:
                np.savez(f, digests=np.array([d for d, _ in part]), vectors=vectors)
            self.vectors.update(zip((d for d, _ in part), vectors))
            self.encoded += len(part)
            done, spent = lo + len(part), time.perf_counter() - started
            if len(missing) > CHUNK:
                eta = (len(missing) - done) * spent / done
                said = (
                    f"{self.folder.name}: {done:,} of {len(missing):,} encoded ({done / spent:.1f}/s, ETA {eta:.0f} s)"
                )
                print(said, file=sys.stderr, flush=True)
        if not texts:
            return np.zeros((0, self.model.out_dim), dtype=np.float32)
        return np.stack([self.vectors[d] for d in digests])


@contextmanager
def cached(model: Model, folder: Path):
    """``model`` encoding through a :class:`DigestCache` in ``folder`` inside the block (it yields the cache)."""
    cache = DigestCache(model, folder, model.encode)
    model.encode = cache  # an instance attribute: Model.encode's callers (a collection's search too) get the cache
    try:
        yield cache
    finally:
        del model.encode
