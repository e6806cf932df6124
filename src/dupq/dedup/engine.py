"""Where a dedup run's heavy stages run: the encoding, the probing of the lists and the search of the blocks.

The run (:mod:`dupq.dedup.run`) reads the input, plans the blocks and keeps the work folder; an engine does the
arithmetic over them: :class:`Local` on this machine, :class:`~dupq.dedup.ray_engine.RayEngine` as tasks on a
Ray cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from dupq.dedup.candidates import probes
from dupq.dedup.clusters import Edges
from dupq.dedup.grouping import search_blocks
from dupq.modeling.model import Model


class Engine(Protocol):
    """Where the heavy stages run: this machine or a Ray cluster.

    ``search(model, config, vectors, searched, start, reranked)`` yields ``(block, edges)`` of each block of the
    plan ``searched`` from ``start`` on, as :func:`~dupq.dedup.grouping.search_blocks` does in this process:
    ``model`` judges the pairs (by ``reranked``, its vectors of every question, where they are given)."""

    reranks: bool  # whether its search can judge by a reranker's vectors (``reranked``)
    search: Callable[..., Iterator[tuple[int, Edges]]]

    def encode(self, model: Model, chunks: Iterable[tuple[int, list[str]]]) -> Iterator[tuple[int, np.ndarray]]: ...

    def probes(self, vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray: ...

    def watch(self, work: Path) -> contextlib.AbstractContextManager: ...


def interrupted(error: str, work: Path) -> str:
    """The sentence of a run whose engine failed mid-way: ``error``, and how to go on from the work folder kept."""
    return f"{error.rstrip('.')}; the work folder {work} is kept: resume with the same command."


class Local:
    """Encoding and search on this machine."""

    reranks = True
    probes = staticmethod(probes)
    search = staticmethod(search_blocks)

    def encode(self, model: Model, chunks: Iterable[tuple[int, list[str]]]) -> Iterator[tuple[int, np.ndarray]]:
        for lo, texts in chunks:
            yield lo, model.encode(texts)

    def watch(self, work: Path) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()
