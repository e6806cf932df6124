"""How well groups of duplicates agree with labelled pairs: pairwise precision, recall and F1.

A labelled pair ``(a, b)`` whose two questions are both in the grouped input is *predicted* a duplicate when both land
in one group. Over the labelled pairs, precision is the share of predicted pairs that are labelled duplicates and recall
the share of labelled duplicates predicted (the pairwise measures of record linkage and clustering, e.g. Menestrina,
Whang & Garcia-Molina 2010). Only labelled pairs count, so a grouping that chains thousands of questions together is not
charged for the unlabelled pairs it joins: read these beside the largest group (``dupq-lab dedup-scale`` prints both).

>>> pairwise(np.array([0, 0, -1]), np.array([0, 1]), np.array([1, 2]), np.array([1, 1]))
{'precision': 1.0, 'recall': 0.5, 'f1': 0.6667, 'pairs': 2}
"""

from __future__ import annotations

import numpy as np


def pairwise(group: np.ndarray, a: np.ndarray, b: np.ndarray, labels: np.ndarray) -> dict:
    """Pairwise scores of ``group (N,)`` (-1: alone) on labelled pairs ``a[i] ~ b[i]`` with ``labels`` (1: duplicate)."""
    same = (group[a] >= 0) & (group[a] == group[b])
    positive = np.asarray(labels) == 1
    tp = int((same & positive).sum())
    precision = tp / max(1, int(same.sum()))
    recall = tp / max(1, int(positive.sum()))
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4), "pairs": len(a)}
