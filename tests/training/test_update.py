"""The optimiser update with the word table's gradient in a kept buffer: the plain dense update's weights."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from dupq.data.tokenizer import Vocabulary
from dupq.training.batches import PairBatches
from dupq.training.config import ModelOptions, TrainConfig
from dupq.training.distributed import World
from dupq.training.loop import Update
from dupq.training.setup import build_model


def _run(small_splits, train: dict, head: str, steps: int, extra=None):
    """The same batches through Update and through zero_grad/backward/step on the dense gradient."""
    config = TrainConfig(**train)
    pairs = small_splits.pool
    vocab = Vocabulary.build(pairs.q1 + pairs.q2)
    model = build_model(vocab, config, ModelOptions(dim=16, head=head))
    reference = copy.deepcopy(model)
    source = PairBatches(vocab, pairs, batch_size=32)
    update = Update(torch.optim.Adam(model.parameters(), lr=0.01, fused=True), model.encoder.embedding)
    dense = torch.optim.Adam(reference.parameters(), lr=0.01, fused=True)
    objective = config.objective()
    rng = np.random.default_rng(0)
    batches = [source.batch(index, rng) for index in source.epoch(rng)][:steps]
    assert len(batches) == steps
    for batch in batches:
        loss = model(batch, objective, 4, World())[0]
        update(loss + (extra(model) if extra else 0))
        ref_loss = reference(batch, objective, 4, World())[0]
        dense.zero_grad(set_to_none=True)
        (ref_loss + (extra(reference) if extra else 0)).backward()
        assert reference.encoder.embedding.weight.grad.layout == torch.strided  # the plain update's dense gradient
        dense.step()
    return model, reference, batches


@pytest.mark.parametrize(
    "train, head",
    [({}, "none"), ({"train_on": "labelled", "losses": {"bce": 1.0, "ranking": 1.0, "triplet": 1.0}}, "mlp")],
)
def test_update_moves_every_weight_as_the_dense_update_does(small_splits, train, head):
    model, reference, batches = _run(small_splits, train, head, steps=6)
    touched = torch.unique(torch.cat([b.ids.flatten() for b in batches]))
    assert 0 < len(touched) < model.encoder.config.vocab_size  # rows without words in a batch are there too
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7, msg=name)


def test_update_takes_a_dense_gradient_of_the_table_as_it_is(small_splits):
    """A loss term over the whole table (dupq adapt's anchor) makes its gradient dense: used unchanged."""
    table = lambda m: m.encoder.embedding.weight.pow(2).sum()  # noqa: E731
    model, reference, _ = _run(small_splits, {}, "none", steps=3, extra=table)
    torch.testing.assert_close(model.encoder.embedding.weight, reference.encoder.embedding.weight, rtol=1e-6, atol=1e-7)


def test_update_leaves_no_gradient_behind(small_splits):
    """After a step the buffer is zero again (a stale row would be added into the next step's gradient)."""
    config = TrainConfig()
    pairs = small_splits.pool
    vocab = Vocabulary.build(pairs.q1 + pairs.q2)
    model = build_model(vocab, config, ModelOptions(dim=8))
    update = Update(torch.optim.Adam(model.parameters(), lr=0.01), model.encoder.embedding)
    source = PairBatches(vocab, pairs, batch_size=16)
    rng = np.random.default_rng(1)
    update(model(source.batch(source.epoch(rng)[0], rng), config.objective(), 2, World())[0])
    assert model.encoder.embedding.weight.grad is None
    assert not update.buffer.any()
