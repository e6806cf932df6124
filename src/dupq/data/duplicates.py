"""Known duplicates: the groups that duplicate labels join, transitively (A ~ B and B ~ C make A ~ C).

Training keeps a question from being pushed away from a known duplicate (:mod:`dupq.training.batches`);
retrieval evaluation takes the groups as relevance judgements (:mod:`dupq.evaluation.retrieval`), as
BEIR's Quora task and sentence-transformers' Quora split do.
"""

from __future__ import annotations

import numpy as np


def duplicate_groups(texts: list[str], q1: list[str], q2: list[str], labels: np.ndarray) -> dict[str, int]:
    """Group id of every text: equal for equal texts and for texts joined by duplicate pairs (transitively).

    Union-find over the duplicate pairs; ``texts`` lists every question that needs a group.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for a, b, y in zip(q1, q2, labels):
        if y == 1:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[ra] = rb
    ids: dict[str, int] = {}
    return {t: ids.setdefault(find(t), len(ids)) for t in texts}
