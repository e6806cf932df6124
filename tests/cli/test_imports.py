"""Commands import what they use: judging a pair and searching with the bundled LSTM model never import torch.

``import torch`` costs seconds, the arithmetic of one judgement milliseconds (dupq-lab cold-start):
each command runs in a fresh interpreter that reports, once it is done, whether torch was imported.
A command that encodes many questions at once does import it (torch's batched LSTM is faster
there); that run shows the check can see torch come in.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dupq.cli import app
from support.torch_free import PAIR, fresh, imports_torch


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """A small collection built with the bundled model (building may import torch: this is another process)."""
    folder = tmp_path_factory.mktemp("no-torch")
    questions = folder / "questions.txt"
    questions.write_text("How do I learn Python?\nHow can I cook rice?\nWhat is the capital of France?\n")
    done = CliRunner().invoke(app, ["index", "build", str(questions), "--out", str(folder / "c")])
    assert done.exit_code == 0, done.output
    return folder / "c"


def test_predict_judges_a_pair_without_torch():
    assert not imports_torch("predict", *PAIR)
    assert not imports_torch("predict", *PAIR, "--json")


def test_search_answers_without_torch(collection):
    assert not imports_torch("search", str(collection), "How do I start learning Python?")
    assert not imports_torch("search", str(collection), "How do I start learning Python?", "--json", "-k", "2")


def test_a_bulk_encode_does_import_torch(tmp_path):
    """Nine pairs are 18 questions, more than the NumPy kernels take: torch encodes them, and the check sees it."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"How do I learn {n}?\tWhat is the best way to learn {n}?\n" for n in range(9)))
    assert imports_torch("predict", "--pairs", str(pairs))


def test_the_service_app_imports_without_torch():
    """The app factory, its routers and the launcher leave torch to the model: `serve` imports it when it starts."""
    printed = fresh(
        "import dupq.service.app, dupq.service.server\n"
        "from dupq.service.app import create_app\ncreate_app('nowhere', token='t').openapi()\n"
        "print('torch' in sys.modules)"
    )
    assert printed == ["False"]


def test_import_dupq_leaves_faiss_and_torch_until_a_name_needs_them():
    """``import dupq`` and its cheap names import neither; asking for Collection brings FAISS, adapt torch."""
    cheap = "import dupq\nfrom dupq import DupqError, Model, dedup"
    steps = [cheap, "from dupq import Collection", "from dupq import adapt"]
    printed = fresh("".join(f"{step}\nprint('faiss' in sys.modules, 'torch' in sys.modules)\n" for step in steps))
    assert printed == ["False False", "True False", "True True"]


PACKAGES = ["dupq", "dupq.collection", "dupq.core", "dupq.dedup", "dupq.index", "dupq.modeling", "dupq.training"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_a_package_hands_on_is_there(package):
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing, f"{package} lists {missing} in __all__ but has no such name"


def test_the_face_is_the_library():
    """One face: the names of ``dupq`` are the library's own, and dedup is the function even after its modules load."""
    import dupq
    from dupq.collection.collection import Collection, Hit
    from dupq.dedup.run import run  # noqa: F401 - a module of the package dupq.dedup, loaded
    from dupq.training.adapt import adapt

    assert (dupq.Collection, dupq.Hit, dupq.adapt) == (Collection, Hit, adapt)
    assert callable(dupq.dedup) and dupq.dedup.__module__ == "dupq.dedup"
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        dupq.Nothing  # noqa: B018
