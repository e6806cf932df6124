"""The encoder registry: its weights' shapes; folders without an encoder type are the LSTM (unknown and retired
types are refused in test_model.py)."""

from __future__ import annotations

import shutil

import pytest
import torch

from dupq.modeling.architecture import ENCODER_TYPES, weight_shapes
from dupq.modeling.encoders import ENCODERS, Encoder, EncoderConfig, pool
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.modeling.model import Model
from support.kit import edit_json

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


def test_a_folder_without_an_encoder_type_loads_as_the_lstm(tiny_model_dir, tmp_path):
    old = shutil.copytree(tiny_model_dir, tmp_path / "old")
    edit_json(old / "config.json", lambda config: config["encoder"].pop("type", None))
    model, reference = Model.load(old), Model.load(tiny_model_dir)
    assert type(model.encoder.network) is Encoder and model.fingerprint() == reference.fingerprint()
