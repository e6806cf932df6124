"""Shared fixtures: the real Quora file, small slices of it, and a tiny model trained on one.

Tests read the data from ``../shared/data`` (beside the repository) or ``$DUPQ_DATA``; nothing
of it is committed. A missing file skips the data tests with a loud reason, except in CI
(``CI`` set), where it is an error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dupq.data import Pairs, SplitConfig, Splits, read_pairs, split_pairs

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DUPQ_DATA", REPO.parent / "shared" / "data" / "quora_duplicate_questions.tsv.gz"))
SMALL_SPLIT = SplitConfig(train_pool=20_000, test=2_000, dev=2_000, labelled_val=2_000)


@pytest.fixture(scope="session")
def data_path() -> Path:
    if not DATA.is_file():
        message = f"the Quora pairs file is not at {DATA} (set DUPQ_DATA)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return DATA


@pytest.fixture(scope="session")
def all_pairs(data_path) -> Pairs:
    pairs, _ = read_pairs(data_path)
    return pairs


@pytest.fixture(scope="session")
def small_splits(all_pairs) -> Splits:
    """The seed split on the first 24,000 rows: ~7,400 training duplicates."""
    return split_pairs(all_pairs.take(all_pairs.rows < 24_000), SMALL_SPLIT)


@pytest.fixture(scope="session")
def tiny_model_dir(small_splits, tmp_path_factory) -> Path:
    """A model folder trained for one epoch (dim 32) on the small split; a few seconds on 2 cores."""
    from dupq.train import TrainConfig, train

    out = tmp_path_factory.mktemp("tiny-model")
    train(small_splits, out, TrainConfig(epochs=1, seed=1), dim=32, log=lambda _: None, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from dupq.model import Model

    return Model.load(tiny_model_dir)


@pytest.fixture
def one_torch_thread():
    """Encode on one thread, as the judging commands do (--threads 1), and give the next test its count back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def head_model_dir(small_splits, tmp_path_factory) -> Path:
    """A labelled-recipe model with an mlp pair head (dim 16, one epoch), calibrated on the small split's dev pairs."""
    from dupq.evaluate import calibrate
    from dupq.model import Model
    from dupq.train import TrainConfig, train

    out = tmp_path_factory.mktemp("head-model")
    config = TrainConfig(recipe="labelled", epochs=1, seed=1, lr=0.005, reduction="mean", mask_false_negatives=True)
    train(small_splits, out, config, dim=16, head="mlp", split=SMALL_SPLIT.__dict__, log=lambda _: None, progress=False)
    model = Model.load(out)
    calibrate(model, small_splits.dev)
    model.save(out)
    return out


@pytest.fixture(scope="session")
def head_model(head_model_dir):
    from dupq.model import Model

    return Model.load(head_model_dir)
