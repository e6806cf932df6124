"""The collection tests' shared makings: template questions and a writer killed mid-way (tests import it by name,
as the fault tests import their faultkit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import numpy as np

from dupq.collection.backend import check_where, hidden, matches
from dupq.index.vectors import search as exact_search

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}
DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]  # `dupq` as a user runs it, in another process
TOPICS = ["Python", "the sky", "weight", "Mongolia", "volcanoes", "French", "rice", "chess", "taxes", "guitars"]
ASKS = ["How do I learn about {}?", "Why is {} so hard?", "What is the history of {}?", "Where can I read about {}?"]


def synthetic(n: int, offset: int = 0) -> list[str]:
    """``n`` distinct questions made from templates (question ``i`` is the same on every call)."""
    return [ASKS[i % 4].format(TOPICS[(i // 4) % len(TOPICS)]) + f" ({i})" for i in range(offset, offset + n)]


def distinct(splits, n: int, skip: int = 0) -> list[str]:
    """``n`` distinct non-empty questions of the small split, after the first ``skip``."""
    seen: dict[str, None] = {}
    for q in splits.pool.q1 + splits.pool.q2 + splits.test.q1 + splits.test.q2:
        if q.strip():
            seen.setdefault(q)
        if len(seen) >= n + skip:
            break
    return list(seen)[skip:]


def check_search(coll, queries: list[str], k: int = 10, where=None, removed=()) -> None:
    """``coll.search`` against the naive reference: brute force over the stored vectors of the rows that are not
    pending and match ``where`` (a loop over ``stored_rows``), the best ``k``. The scores agree (not the ids: the small
    model ties texts), every hit matches ``where``, none is ``removed``; where ``k`` takes every row, the keys too."""
    rows = coll.stored_rows()  # in the order of coll.stored_vectors()
    keep = [
        n for n, (*_, meta) in enumerate(rows) if not hidden(meta or {}) and matches(meta or {}, check_where(where))
    ]
    got = coll.search(queries, k=k, where=where)
    if not keep:
        assert not any(got), got
        return
    scores, found = exact_search(coll.model.encode(queries), coll.stored_vectors()[keep], min(k, len(keep)))
    for hits, want, ids in zip(got, scores.tolist(), found.tolist()):
        np.testing.assert_allclose([h.score for h in hits], want, atol=1e-5)
        assert all(matches(h.metadata, check_where(where)) for h in hits) and not {h.key for h in hits} & set(removed)
        assert k < len(keep) or sorted(h.key for h in hits) == sorted(rows[keep[j]][1] for j in ids)


def kill_9_when(command: list[str], enough: Callable[[str], bool] | int) -> list[str]:
    """Run ``command`` (one thread) and SIGKILL it at the first line of its output for which ``enough`` is true (or
    at its ``enough``-th line); fails unless that is how it ended. Returns the lines it printed."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ONE_THREAD)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if len(lines) == enough if isinstance(enough, int) else enough(line):
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    return lines
