"""The encoder registry: a GRU trains, saves, loads and searches; folders without an encoder type are the LSTM."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.architecture import ENCODER_TYPES, weight_shapes
from dupq.modeling.encoders import ENCODERS, Encoder, EncoderConfig, GRUEncoder, pool
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.modeling.model import Model
from dupq.search.collection import Collection
from dupq.training.batches import PairBatches
from dupq.training.losses import triplet_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_pool_matches_a_loop_over_each_questions_real_tokens():
    torch.manual_seed(0)
    states, lengths = torch.randn(4, 6, 3), torch.tensor([6, 1, 3, 4])
    for how, reduce in (("mean", lambda s: s.mean(0)), ("max", lambda s: s.max(0).values)):
        expected = torch.stack([reduce(states[i, : int(n)]) for i, n in enumerate(lengths)])
        torch.testing.assert_close(pool(states, lengths, how), expected)


@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("head", [None, "cosine", "mlp"])
def test_weight_shapes_are_the_torch_modules_state_dicts(kind, bidirectional, head):
    """What Model.load checks a folder's weights against, without torch, is what the modules hold."""
    config = EncoderConfig(vocab_size=11, dim=6, bidirectional=bidirectional)
    head_config = HeadConfig(kind=head, dim=config.out_dim, hidden=5) if head else None
    modules = {"": ENCODERS[kind](config)} | ({"head.": PairHead(head_config)} if head else {})
    expected = {p + k: tuple(v.shape) for p, m in modules.items() for k, v in m.state_dict().items()}
    assert weight_shapes(kind, config, head_config) == expected
    assert ENCODER_TYPES == tuple(ENCODERS)  # the torch-free names of the registry


def test_gru_encoder_is_embedding_gru_mean_normalise():
    torch.manual_seed(0)
    encoder = GRUEncoder(EncoderConfig(vocab_size=20, dim=8)).eval()
    ids, lengths = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]]), torch.tensor([3, 2])
    rows = []
    for row, n in zip(ids, lengths):  # one question at a time, without padding
        out, _ = encoder.gru(encoder.embedding(row[None, : int(n)]))  # (1, n, 8)
        rows.append(torch.nn.functional.normalize(out[0].mean(0), dim=-1))
    torch.testing.assert_close(encoder(ids, lengths), torch.stack(rows))
    assert ENCODERS == {"lstm": Encoder, "gru": GRUEncoder}


def _mean_triplet_loss(encoder, batches):
    return float(
        np.mean([triplet_loss(*encoder(b.ids, b.lengths).split(b.size), reduction="mean").item() for b in batches])
    )


def test_a_gru_model_trains_saves_loads_and_searches(small_splits, tmp_path):
    duplicates = small_splits.train.take(small_splits.train.labels == 1)
    vocab = Vocabulary.build(duplicates.q1 + duplicates.q2)
    torch.manual_seed(0)
    model = Model.create(vocab, dim=16, encoder="gru")
    encoder = model.encoder.network.train()
    source, rng = PairBatches(vocab, duplicates, batch_size=64), np.random.default_rng(0)
    held = [source.batch(np.arange(i, i + 64), rng) for i in range(0, 640, 64)]  # pairs not trained on below
    before = _mean_triplet_loss(encoder.eval(), held)
    optimizer = torch.optim.Adam(encoder.parameters(), lr=0.01)
    for _ in range(60):
        batch = source.batch(rng.choice(np.arange(640, len(duplicates)), 64, replace=False), rng)
        loss = triplet_loss(*encoder.train()(batch.ids, batch.lengths).split(batch.size), reduction="mean")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = _mean_triplet_loss(encoder.eval(), held)
    assert after < before - 0.02, (before, after)

    model.save(tmp_path / "gru")
    config = json.loads((tmp_path / "gru" / "config.json").read_text())
    assert config["encoder"]["type"] == "gru"
    loaded = Model.load(tmp_path / "gru")
    assert isinstance(loaded.encoder.network, GRUEncoder) and loaded.fingerprint() == model.fingerprint()
    texts = list(dict.fromkeys(duplicates.q2[:300]))
    np.testing.assert_array_equal(loaded.encode(texts), model.encode(texts))

    Collection.build(tmp_path / "faq", texts, loaded).close()
    with Collection.open(tmp_path / "faq") as collection:  # no model given: the recorded GRU folder is loaded
        assert isinstance(collection.model.encoder.network, GRUEncoder)
        hits = collection.search(texts[:20], k=3)
    brute = np.argsort(-(model.encode(texts[:20]) @ model.encode(texts).T), axis=1)[:, :3]  # (20, 3)
    assert [[h.text for h in row] for row in hits] == [[texts[i] for i in row] for row in brute]


def test_a_folder_without_an_encoder_type_loads_as_the_lstm(tiny_model_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(tiny_model_dir, old)
    config = json.loads((old / "config.json").read_text())
    config["encoder"].pop("type", None)
    (old / "config.json").write_text(json.dumps(config))
    model, reference = Model.load(old), Model.load(tiny_model_dir)
    assert type(model.encoder.network) is Encoder and model.fingerprint() == reference.fingerprint()

    config["encoder"]["type"] = "transformer"
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(DupqError, match="unknown encoder type 'transformer'"):
        Model.load(old)
