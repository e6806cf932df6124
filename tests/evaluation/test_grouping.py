"""Pairwise scores of groups against scikit-learn's precision, recall and F1 on the same pairs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import precision_recall_fscore_support

from dupq.evaluation.grouping import pairwise


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(2, 40), m=st.integers(1, 60))
def test_pairwise_equals_scikit_learn(seed, n, m):
    rng = np.random.default_rng(seed)
    group = rng.integers(-1, 4, n)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    labels = rng.integers(0, 2, m)
    predicted = [(group[i] >= 0 and group[i] == group[j]) for i, j in zip(a, b)]
    p, r, f, _ = precision_recall_fscore_support(labels, predicted, average="binary", zero_division=0)
    got = pairwise(group, a, b, labels)
    assert (got["precision"], got["recall"], got["f1"]) == pytest.approx((p, r, f), abs=1e-4)
