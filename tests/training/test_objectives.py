"""Objectives point the losses at the right rows: checked against the losses called by hand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig, split_pairs
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.training import objectives
from dupq.training.batches import Batch, PairBatches
from dupq.training.config import ModelOptions, TrainConfig
from dupq.training.distributed import World
from dupq.training.loop import Loop, Update, fit
from dupq.training.losses import multiple_negatives_ranking_loss, pair_bce_loss, triplet_loss
from dupq.training.objectives import Objective, parse_losses
from dupq.training.setup import build_model
from dupq.training.step import encode_batch, validate
from dupq.training.train import train


def _batch(labels, groups, extra=0, dim=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = len(labels)
    v = torch.nn.functional.normalize(torch.randn(2 * b + extra, dim, generator=g, dtype=torch.float64), dim=-1)
    ids, lengths = torch.zeros(2 * b + extra, 1, dtype=torch.long), torch.ones(2 * b + extra, dtype=torch.long)
    return v, Batch(ids, lengths, torch.tensor(labels, dtype=torch.float32), torch.tensor(groups), b)


def test_seed_objective_is_the_seed_triplet_loss_on_the_whole_batch():
    v, batch = _batch([1, 1, 1, 1], list(range(8)))
    assert Objective({"triplet": 1.0})(v, batch).item() == pytest.approx(triplet_loss(v[:4], v[4:]).item(), rel=1e-12)


def test_labelled_objective_ranks_duplicate_rows_against_every_other_question_and_masks_their_group():
    labels = [1, 0, 1, 0, 1]
    # Row 0's q1 has the same group as row 3's q2 (the same text), which must not be its negative.
    groups = [10, 11, 12, 13, 14, 10, 21, 12, 10, 14, 30]
    v, batch = _batch(labels, groups, extra=1)
    head = PairHead(HeadConfig("cosine", 5)).double()
    objective = Objective({"ranking": 0.5, "bce": 2.0}, mask_false_negatives=True)
    got = objective(v, batch, head).item()
    v1, v2, extra = v[:5], v[5:10], v[10:]
    dup, other = [0, 2, 4], [1, 3]
    candidates = torch.cat([v1[dup], v1[other], v2[other], extra])  # (6, d): positives first
    column_groups = [10, 12, 14, 11, 13, 21, 10, 30]
    excluded = torch.tensor(
        [[column_groups[j] in (groups[r], groups[5 + r]) and j != i for j in range(8)] for i, r in enumerate(dup)]
    )
    assert excluded.any()  # the mask is exercised
    ranking = multiple_negatives_ranking_loss(v2[dup], v1[dup], candidates[3:], 20.0, excluded)
    bce = pair_bce_loss(head(v1, v2), batch.labels)
    assert got == pytest.approx(0.5 * ranking.item() + 2.0 * bce.item(), rel=1e-9)


def test_parse_losses_reads_weights_and_refuses_bad_ones():
    assert parse_losses(["bce", "ranking:0.5"]) == {"bce": 1.0, "ranking": 0.5}
    for bad in (["hinge"], ["bce:x"], ["bce:-1"], ["bce:inf"], []):
        with pytest.raises(DupqError, match="^--loss: "):
            parse_losses(bad)


# The loss a run logs: training and validation report one figure for the same batch.


def _one_batch_run(small_splits, config, options):
    """A model and a batch source of exactly one batch (its pairs in one batch, no dropout)."""
    pairs = small_splits.pool.take(torch.arange(96).numpy())  # both labels: every loss has rows to read
    vocab = Vocabulary.build(pairs.q1 + pairs.q2)
    torch.manual_seed(0)
    return build_model(vocab, config, options), PairBatches(vocab, pairs, batch_size=len(pairs))


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize(
    "losses, head",
    [({"triplet": 2.0}, "none"), ({"bce": 0.5, "ranking": 3.0, "triplet": 2.0}, "mlp"), ({"ranking": 0.25}, "none")],
)
def test_training_and_validation_log_the_same_loss_for_the_same_batch(small_splits, losses, head, reduction):
    """One batch through the training loop's step and through validation: the same per-pair loss.

    The figure is checked against the losses called by hand too: each weighted loss, a triplet
    loss summed over the batch's rows counted per pair. The loop's code before this test logged
    ``triplet:2`` summed as the batch's sum times its pairs in training (e.g. 240) and per pair in
    validation (e.g. 0.95).
    """
    if "triplet" in losses:
        losses = {**losses, "triplet": {"weight": losses["triplet"], "reduction": reduction}}
    config = TrainConfig(train_on="labelled", losses=losses, lr=0.0, epochs=1)
    model, source = _one_batch_run(small_splits, config, ModelOptions(dim=16, head=head))
    update, done = Update(torch.optim.Adam(model.parameters(), lr=0.0), model.encoder.embedding), []
    loss_of = lambda batch: model(batch, config.objective(), config.chunks, World())  # noqa: E731
    fit(Loop(1, 0.0, 0, progress=False), model, source, loss_of, update, lambda epoch, loss: done.append(loss))
    loss_sum, pairs = done[0].loss_sum, done[0].rows
    validated = validate(model, source, config)  # the same pairs, in another order: the same batch
    assert pairs == 96 and loss_sum / pairs == pytest.approx(validated.loss, rel=1e-5)

    batch = source.batch(torch.arange(96).numpy(), None)
    v = encode_batch(model, batch, config.chunks)
    by_hand = {
        name: (spec["weight"] if name == "triplet" else spec)
        * Objective({name: {"reduction": reduction} if name == "triplet" else 1.0})(v, batch, model.head).item()
        for name, spec in losses.items()
    }
    if reduction == "sum" and "triplet" in by_hand:
        by_hand["triplet"] /= 96
    assert validated.loss == pytest.approx(sum(by_hand.values()), rel=1e-5)


@pytest.mark.slow
def test_a_loss_added_by_one_registered_class_trains_from_its_name(synthetic_pairs, tmp_path, monkeypatch):
    """The whole diff of adding a loss: the class below. Its name then reaches --loss, presets and train()."""
    monkeypatch.setattr(objectives, "LOSSES", dict(objectives.LOSSES))  # the registry as it was, after the test

    @objectives.register("toy")
    @dataclass
    class Toy(objectives.Loss):
        """Squared distance of each labelled pair's cosine from ``target`` times its label."""

        target: float = 1.0

        def __call__(self, rows):
            v1, v2, _ = rows.pairs
            return ((v1 * v2).sum(-1) - self.target * rows.batch.labels).pow(2).mean()

    assert parse_losses(["toy:2"]) == {"toy": 2.0}
    v, batch = _batch([1, 0, 1], list(range(6)))
    by_hand = sum(((v[i] @ v[3 + i]).item() - 0.5 * y) ** 2 for i, y in enumerate([1, 0, 1])) / 3
    assert Objective({"toy": {"weight": 2.0, "target": 0.5}})(v, batch).item() == pytest.approx(2 * by_hand)
    split = SplitConfig(train_pool=3_000, test=500, dev=500, labelled_val=500)
    config = TrainConfig(train_on="labelled", losses={"toy": {"target": 0.9}}, epochs=3, batch_size=64, lr=0.01)
    quiet = {"split": split.__dict__, "log": lambda _: None, "progress": False}
    model = train(split_pairs(synthetic_pairs, split), tmp_path / "m", config, dim=8, **quiet)
    history = model.metrics["training"]["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert model.metrics["training"]["train"]["losses"] == {"toy": {"target": 0.9}}
