"""Faults of a model's own parts: the static branch's taught words, a joined model's weight and branch, and the
words ``dupq adapt`` teaches in scripts and punctuation beyond ASCII.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faultkit import NESTED, clean, dupq, fake_teacher, model_copy, pairs_file

from support.errors import refused

pytestmark = pytest.mark.faults

SPLIT = ["--train-pool", "300", "--test-size", "40", "--dev-size", "60", "--threads", "1"]


def _taught_model(tmp: Path) -> Path:
    """The bundled model whose static branch was taught two words (a static-words.json), saved in ``tmp/m``."""
    from dupq.modeling.model import Model

    model = Model.load()
    lstm = model.encoder.lstm()
    rows = np.ones((2, lstm.branch.dim), np.float32)
    taught = lstm.with_branch(lstm.branch.with_added(["qqqzz", "zzzqq"], rows))
    Model(taught, model.judge, model.metrics).save(tmp / "m")
    return tmp / "m"


@pytest.mark.parametrize("damage", ["nested", "bom", "repeated"])
def test_a_damaged_static_words_file(tmp_path: Path, damage):
    """static-words.json nested 1,000 deep, behind a byte-order mark, or naming a word twice: one sentence naming it,
    from info, predict and compact."""
    model = _taught_model(tmp_path)
    path = model / "static-words.json"
    if damage == "nested":
        path.write_text(NESTED)
    elif damage == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    else:
        path.write_text('["qqqzz", "qqqzz"]')
    for command in (["info", str(model)], ["predict", "How?", "Why?", "--model", str(model)]):
        refused(dupq(*command), "static-words.json")
    refused(dupq("compact", str(model), "--out", str(tmp_path / "out")), "static-words.json")


def test_join_weights_out_of_range(tmp_path: Path):
    """--join-weight 2e6, inf or -1: refused before anything is written; with --overwrite, the working model stays."""
    data = pairs_file(tmp_path, 400)
    out = model_copy(tmp_path / "working")
    before = sorted(p.name for p in out.iterdir())
    for weight in ("2e6", "inf", "-1"):
        run = dupq("distil", "teacher-model", "--data", str(data), "--out", str(out), "--overwrite", *SPLIT,
                   "--join", "bundled", "--join-weight", weight)  # fmt: skip
        refused(run, "must be a number from 0 to")
    assert sorted(p.name for p in out.iterdir()) == before
    clean(dupq("info", str(out)))


def test_compact_no_branch_of_a_joined_model(tmp_path: Path):
    """`dupq compact JOINED --no-branch` refuses in one sentence (it used to copy the joined model as it was)."""
    data = pairs_file(tmp_path, 400)
    joined = tmp_path / "joined"
    clean(dupq("distil", "teacher-model", "--data", str(data), "--out", str(joined), *SPLIT, "--join", "bundled",
               "--join-weight", "0.5"))  # fmt: skip
    refused(dupq("compact", str(joined), "--out", str(tmp_path / "c"), "--no-branch"), "no static branch to leave out")
    assert not (tmp_path / "c").exists()


def test_adapt_words_beyond_ascii(tmp_path: Path, monkeypatch):
    """adapt on Chinese, Arabic and full-width punctuation teaches words, not whole questions or words with a
    question mark inside; a script it cannot cut into words is said in one warning line."""
    import dupq.training.distil.branch as branch
    from dupq.modeling.model import Model
    from dupq.training.adapt import AdaptConfig, adapt_with

    monkeypatch.setattr(branch, "FIT_COSINE", -1.0)  # a random teacher's words: taught anyway, through a poor map

    texts = [f"如何学习编程语言第{i}课" for i in range(10)]
    texts += [f"كيف أتعلم البرمجة رقم{i}؟" for i in range(10)]
    texts += [f"How to learn qqz{i}？" for i in range(10)]
    texts += [f"เรียนภาษาไทยอย่างไร{i}" for i in range(10)]
    said: list[str] = []
    model = adapt_with(Model.load(), texts, tmp_path / "a", fake_teacher(), "fake", AdaptConfig(epochs=1, batch_size=16),
                  log=said.append, progress=False)  # fmt: skip
    words = model.encoder.lstm().branch.added_words
    assert not [w for w in words if any(c in w for c in "؟？?")], words
    assert not [w for w in words if len(w) > 1 and any("\u4e00" <= c <= "\u9fff" for c in w)], words
    assert "编" in words and "كيف" in words and "qqz3" in words
    assert len([line for line in said if "not cut into words" in line]) == 1, said
    reloaded = Model.load(tmp_path / "a")
    question = ["如何学习编程"]
    assert np.allclose(reloaded.encode(question), model.encode(question), atol=1e-6)
