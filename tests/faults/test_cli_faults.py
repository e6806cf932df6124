"""Faults of the command line: files and arguments a user gives, and the model folders dupq reads.

Each test runs ``dupq`` as a user does (the model folders both ways, the ``run`` fixture) and checks the promise
of every command: a mistake is one ``error:`` sentence and exit status 2, and nothing is stored or written.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from faultkit import AUTH, build, clean, client, dupq, folder_of, model_copy, stored

from support.errors import library_refuses, refused

pytestmark = pytest.mark.faults


def test_every_line_accounted_for(tmp_path: Path):
    """Unclosed quotes and wrong field counts, each line with its reason (train/evaluate read this way)."""
    from dupq.data.pairs import read_pairs

    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(30):
        q1 = ('"' if i in (4, 17) else "") + f"How do I do thing {i}?"
        row = [str(i), str(2 * i), str(2 * i + 1), q1, f"What is thing {i}?", str(i % 2)]
        lines.append("\t".join(row[:4] if i == 9 else row))
    (tmp_path / "p.tsv").write_text("\n".join(lines) + "\n")
    pairs, dropped = read_pairs(tmp_path / "p.tsv")
    assert dropped.reasons == {"unclosed quote": 2, "wrong number of fields": 1}
    assert len(pairs) + dropped.lines == 30
    run = clean(dupq("index", "build", str(tmp_path / "p.tsv"), "--out", str(tmp_path / "c")))
    assert b"2 unclosed quote" in run.stderr


def test_questions_without_words(tmp_path: Path):
    """ "???" is refused by the library and the API, never stored or called a duplicate (the command line:
    test_one_question_rule_on_the_command_line)."""
    from dupq.modeling.model import Model

    folder = build(tmp_path / "c")
    assert library_refuses(lambda: Model.load().similarity("", ""))
    (tmp_path / "q.txt").write_text("???\n!!!\n...\nHow do I learn Python?\n")
    clean(dupq("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "d.json")))
    assert json.loads((tmp_path / "d.json").read_text()) == []
    with client(folder) as c:
        codes = [
            c.post("/similarity", json={"q1": "\u001c", "q2": "\u001d"}).status_code,
            c.post("/search", json={"question": "?!?"}).status_code,
            c.post("/questions", json={"text": "..."}, headers=AUTH).status_code,
        ]
    assert codes == [422, 422, 422] and len(stored(folder)) == 40


def edited(file: str, edit):
    """A damage: ``edit`` applied to the JSON of a model folder's ``file``."""

    def damage(folder: Path) -> None:
        obj = json.loads((folder / file).read_text())
        edit(obj)
        (folder / file).write_text(json.dumps(obj))

    return damage


def nan_weight(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    weights[sorted(weights)[0]].view(-1)[0] = float("nan")
    save_file(weights, str(folder / "model.safetensors"))


# Damage to a copy of the bundled model that `predict` must refuse in one sentence holding the words given.
BAD_MODELS = {
    "no folder": (shutil.rmtree, "does not exist"),
    "empty": (lambda f: [p.unlink() for p in f.iterdir()], "is empty"),
    "config not JSON": (lambda f: (f / "config.json").write_text("{not json"), "is corrupt"),
    "config a list": (lambda f: (f / "config.json").write_text("[]"), "not a dupq model config"),
    "weights zeros": (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 10), "is corrupt"),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), "missing"),
    "vocab not UTF-8": (lambda f: (f / "vocab.json").write_bytes(b"\xff\xfe"), "is corrupt"),
    "weights nan": (nan_weight, ""),
    "dim a string": (edited("config.json", lambda c: c["encoder"].update(dim="128")), ""),
    "dropout 5": (edited("config.json", lambda c: c["encoder"].update(dropout=5)), ""),
    "encoder null": (edited("config.json", lambda c: c.update(encoder=None)), ""),
    "threshold nan": (edited("config.json", lambda c: c.update(threshold=math.nan)), ""),
    "threshold_info a string": (edited("config.json", lambda c: c.update(threshold_info="dev")), ""),
    "number token": (edited("vocab.json", lambda v: v["tokens"].__setitem__(5, 7)), ""),
    "max_tokens -1": (edited("vocab.json", lambda v: v.update(max_tokens=-1)), ""),
    "tokens a string": (edited("vocab.json", lambda v: v.update(tokens="abc")), ""),
    "no tokens": (edited("vocab.json", lambda v: v.pop("tokens")), ""),
    "head a list": (edited("config.json", lambda c: c.update(head=[])), ""),
    "head a string": (edited("config.json", lambda c: c.update(head="mlp")), ""),
    "head kind 5": (edited("config.json", lambda c: c["head"].update(kind=5)), ""),
    # Huge sizes, and a calibration that overflows.
    "dim 65536": (edited("config.json", lambda c: c["encoder"].update(dim=65536)), ""),
    "head hidden 1e9": (edited("config.json", lambda c: c["head"].update(hidden=10**9)), ""),
    "vocab_size 1e9": (edited("config.json", lambda c: c["encoder"].update(vocab_size=10**9)), ""),
    "calibration a 1e308": (edited("config.json", lambda c: c["calibration"].update(a=1e308)), ""),
}


@pytest.mark.parametrize("fault", BAD_MODELS)
def test_bad_model_folders(tmp_path: Path, run, fault):
    """Missing or corrupt files, wrong types, NaN weights, sizes the machine cannot hold, thresholds out of range:
    refused by `predict`, and by `info` naming the folder."""
    damage, said = BAD_MODELS[fault]
    model = model_copy(tmp_path / "m")
    damage(model)
    refused(run("predict", "How do I learn Python?", "How can I learn Python?", "--model", str(model)), said)
    refused(run("info", str(model)), str(model))


def test_bad_metrics_file_and_thresholds(tmp_path: Path):
    """metrics.json not an object (evaluate, report); a dedup threshold out of range."""
    model = model_copy(tmp_path / "m")
    (model / "metrics.json").write_text("[1, 2]")
    refused(dupq("evaluate", str(model)))
    refused(dupq("report", str(model), "--out", str(tmp_path / "r")))
    (tmp_path / "q.txt").write_text("How do I learn Python?\nHow can I learn Python?\n")
    for threshold in ("5", "nan"):
        refused(dupq("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "d.json"), "--threshold", threshold))


def test_messages_name_the_real_problem(tmp_path: Path):
    """A file where a folder is needed (and the reverse); a header-only file for index add."""
    folder = build(tmp_path / "c")
    (tmp_path / "h.tsv").write_text("question\tanswer\n")
    refused(dupq("search", str(tmp_path / "h.tsv"), "How?"), "a file, not a folder")
    refused(dupq("index", "add", str(folder), "--file", str(tmp_path)), "a folder, not a file")
    refused(dupq("index", "add", str(folder), "--file", str(tmp_path / "h.tsv")), "holds no questions")
    refused(dupq("predict", "How?", "Why?", "--model", str(tmp_path / "h.tsv")), "model folder")


def test_links_out_of_a_model_folder(tmp_path: Path):
    """A sentence-transformers model folder whose subfolder links to a pickle outside it is refused before loading."""
    outside = folder_of(tmp_path / "elsewhere", {"pytorch_model.bin": b"not loaded: a pickle can run code"})
    model = tmp_path / "m"
    files = model / "sentence-transformers"
    files.mkdir(parents=True)
    (files / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "x"}]')
    (files / "model.safetensors").write_bytes(b"{}")
    (files / "2_Dense").symlink_to(outside, target_is_directory=True)
    encoder = {"type": "sentence-transformers", "dim": 384, "folder": "sentence-transformers"}
    config = {"format": "dupq-model/1", "encoder": encoder, "threshold": 0.5}
    (model / "config.json").write_text(json.dumps(config))
    refused(dupq("predict", "How?", "Why?", "--model", str(model)), "outside")
