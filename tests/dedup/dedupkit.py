"""The dedup tests' shared makings (imported by name, as the fault tests import their faultkit): questions of the
small split, the star rule written plainly, and the checks that two runs group alike."""

from __future__ import annotations

import csv

from support.kit import cli


def pool_texts(splits, n: int) -> list[str]:
    """The distinct non-empty questions among the first ``n`` pairs of the small split's pool."""
    return list(dict.fromkeys(q for q in splits.pool.q1[:n] + splits.pool.q2[:n] if q.strip()))


def naive_star(score: list[list[float]], threshold: float) -> dict[int, list[int]]:
    """The star rule in Python loops over every pair's ``score``: ``{centre: its members, best first}``; the
    question with the most neighbours above ``threshold`` first takes those not taken yet."""
    n = len(score)
    nbrs = [[j for j in range(n) if j != i and score[i][j] > threshold] for i in range(n)]
    taken: set[int] = set()
    groups = {}
    for c in sorted(range(n), key=lambda i: (-len(nbrs[i]), i)):
        free = [j for j in nbrs[c] if j not in taken]
        if c in taken or not free:
            continue
        groups[c] = sorted(free, key=lambda j: (-score[c][j], j))
        taken.update([c, *free])
    return groups


def member_sets(clusters) -> list[list[int]]:
    """The groups of ``clusters`` as sorted lists of members, in a fixed order."""
    return sorted(sorted(g.tolist()) for g in clusters.groups())


def check_streamed_as_in_memory(path, memory) -> None:
    """A streamed run's CSV at ``path`` gives each grouped question the representative and score ``memory`` (the
    clusters of an in-memory run) gives it."""
    with open(path, newline="") as f:
        streamed = {int(r["index"]): (int(r["representative"]), round(float(r["score"]), 4)) for r in csv.DictReader(f)}
    expected = {
        i: (int(memory.representative[i]), round(float(memory.score[i]), 4))
        for g in memory.groups()
        for i in g.tolist()
    }
    assert streamed == expected


def run_cli(*args):
    """`dupq dedup ARGS --no-progress` in this process."""
    return cli("dedup", *args, "--no-progress")
