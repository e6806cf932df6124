"""Faults of the files and folders dupq reads and writes: nesting that breaks a parser, folders that
a command would overwrite, teacher vectors a run would throw away, adds a re-encoding would miss.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import faultkit
import numpy as np
import pytest
from faultkit import AUTH, TRAIN, Server, build, clean, dupq, folder_of, model_copy, pairs_file, stored, synthetic

from support.errors import refused
from support.serving import free_port
from support.serving import http as request

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("name", ["metrics.json", "config.json", "vocab.json"])
def test_nested_json_in_model_files(tmp_path: Path, name):
    """1,000 nested brackets in a model's metrics.json, config.json or vocab.json: one sentence from info, predict, compact."""
    model = model_copy(tmp_path / "m")
    (model / name).write_text(faultkit.NESTED)
    refused(dupq("info", str(model)), "nests more than")
    refused(dupq("predict", "How?", "Why?", "--model", str(model)), "nests more than")
    refused(dupq("compact", str(model), "--out", str(tmp_path / "out")), "nests more than")


def test_nested_json_in_collection_and_teacher_files(tmp_path: Path):
    """1,000 nested brackets in a collection's manifest.json (search, serve) or a teacher cache's teacher.json."""
    from dupq.core.errors import DupqError
    from dupq.training.distil.teacher import TeacherCache

    folder = build(tmp_path / "c", n=10)
    (folder / "manifest.json").write_text(faultkit.NESTED)
    refused(dupq("search", str(folder), "How do I learn Python?"), "nests more than")
    refused(dupq("serve", str(folder), "--port", str(free_port())), "nests more than")
    with pytest.raises(DupqError, match="nests more than"):
        TeacherCache.load(folder_of(tmp_path / "t", {"teacher.json": faultkit.NESTED}))


def test_compact_over_an_existing_folder(tmp_path: Path):
    """`dupq compact` refuses a folder that holds a model or anything else without --overwrite; with it, replaces a model."""
    model = model_copy(tmp_path / "m")
    clean(dupq("compact", str(model), "--out", str(tmp_path / "e")))
    before = (tmp_path / "e" / "model.safetensors").read_bytes()
    refused(dupq("compact", str(model), "--out", str(tmp_path / "e"), "--half"), "--overwrite")
    assert (tmp_path / "e" / "model.safetensors").read_bytes() == before
    folder_of(tmp_path / "full", {"notes.txt": "mine"})
    refused(dupq("compact", str(model), "--out", str(tmp_path / "full")), "--overwrite")
    assert (tmp_path / "full" / "notes.txt").exists()
    clean(dupq("compact", str(model), "--out", str(tmp_path / "e"), "--half", "--overwrite"))
    assert json.loads((tmp_path / "e" / "config.json").read_text())["weights_dtype"] == "float16"


def test_commands_that_write_a_folder(tmp_path: Path):
    """train, report, compact, adapt, index build and index reencode refuse a folder that holds files (one rule);
    `--overwrite` of every command that writes a model folder (train, compact, adapt, distil branch and
    teacher-model) refuses a collection folder: one model-folder rule, and a collection is never replaced."""
    model = model_copy(tmp_path / "m")
    folder = build(tmp_path / "c", n=10)
    full = folder_of(tmp_path / "full", {"notes.txt": "mine"})
    (tmp_path / "q.txt").write_text("\n".join(synthetic(10)) + "\n")
    for command in (
        ["train", "--out", str(full), "--epochs", "1"],
        ["report", str(model), "--out", str(full)],
        ["compact", str(model), "--out", str(full)],
        ["adapt", str(tmp_path / "q.txt"), "--out", str(full)],
        ["index", "build", str(tmp_path / "q.txt"), "--out", str(full)],
        ["index", "reencode", str(folder), "--model", str(model), "--out", str(full)],
    ):
        refused(dupq(*command), "already exists")
    assert sorted(p.name for p in full.iterdir()) == ["notes.txt"]
    data, before = pairs_file(tmp_path), sorted(p.name for p in folder.iterdir())
    for command in (
        ["train", "--data", str(data), "--epochs", "1", *TRAIN],
        ["compact", str(model)],
        ["adapt", str(tmp_path / "q.txt")],
        ["distil", "branch", str(model)],
        ["distil", "teacher-model", "--data", str(data)],
    ):
        refused(dupq(*command, "--out", str(folder), "--overwrite"), "not a dupq model folder")
    assert sorted(p.name for p in folder.iterdir()) == before
    clean(dupq("search", str(folder), "How do I learn about Python in step 0?"))


def test_adapt_cache_keeps_teacher_vectors(tmp_path: Path):
    """adapt with --cache of a teach run keeps every vector there and encodes only the questions it lacks."""
    from dupq.modeling.model import Model
    from dupq.training.adapt import AdaptConfig, adapt_with
    from dupq.training.distil.teacher import TeacherCache, teach

    calls: list[str] = []
    encode, cache = faultkit.fake_teacher(calls), tmp_path / "cache"
    taught, mine = synthetic(60), synthetic(40, offset=40)  # 20 in common
    teach(taught, cache, encode, "fake")
    before = TeacherCache.load(cache)
    calls.clear()
    config = AdaptConfig(epochs=1, batch_size=16)
    adapt_with(Model.load(), mine, tmp_path / "a", encode, "fake", config, cache, log=lambda _: None, progress=False)
    after = TeacherCache.load(cache)
    assert set(before.texts) <= set(after.texts) and set(mine) <= set(after.texts)
    # the stored vectors, not new ones
    assert np.array_equal(after.vectors[after.rows(before.texts)].numpy(), before.vectors.numpy())
    assert sorted(calls) == sorted(set(mine) - set(taught))


def test_reencode_while_adding(tmp_path: Path):
    """`index reencode` of a collection served while 4 writers add to it: every add acknowledged before it says
    what it copied is in the new collection, and the count it gives is the new one's."""
    from dupq.modeling.model import BUNDLED

    old, new = build(tmp_path / "old", n=3000), tmp_path / "new"
    acknowledged: dict[str, float] = {}  # text -> when its 201 came
    stop = threading.Event()
    with Server(old, "--workers", "1") as server:

        def writer(n: int) -> None:
            i = 0
            while not stop.is_set():
                text = f"Writer {n} adds question {i} about {n * 1000 + i}?"
                if request(server.url + "/questions", json.dumps({"text": text}).encode(), AUTH).status == 201:
                    acknowledged[text] = time.monotonic()
                i += 1

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(1)
        started = time.monotonic()
        command = [*faultkit.DUPQ, "index", "reencode", str(old), "--model", str(BUNDLED), "--out", str(new)]
        reencode = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=faultkit.ENV)
        # "copied N questions read at the start and M added to OLD meanwhile", said while it holds the writer lock
        said = next((line.decode() for line in reencode.stdout if line.startswith(b"copied")), "")
        copied_at = time.monotonic()
        errors = reencode.communicate()[1]
        stop.set()
        for t in threads:
            t.join()
    assert reencode.returncode == 0 and b"Traceback" not in errors, errors[-600:]
    numbers = [int(w.replace(",", "")) for w in said.split() if w.replace(",", "").isdigit()]
    texts = {text for _, _, text in stored(new)}
    assert len(numbers) >= 2 and numbers[0] + numbers[1] == len(texts), said
    before = [text for text, at in acknowledged.items() if at < copied_at]
    assert any(acknowledged[text] > started for text in before), "no add was made while it ran"
    assert [text for text in before if text not in texts] == []
