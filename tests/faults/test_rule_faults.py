"""Faults of the rules every entry point shares: a question, a key, a retry, a bearer token, a dev split a
threshold can be chosen on, a worker that cannot start, and the smaller sentences around them.
Each rule lives in one function; a test runs it through the command line, the library and the service alike.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from faultkit import AUTH, Server, build, clean, client, dupq, model_copy, pairs_file, stored

from support.errors import library_refuses, refused
from support.serving import free_port

pytestmark = pytest.mark.faults

LONG = "Why " + "is it so " * 111 + "?"  # 1,004 characters: the API refuses it with 422


def test_calibrate_on_a_single_label(tmp_path: Path):
    """`dupq calibrate` on dev pairs of one label refuses in a sentence and leaves the model's threshold as it was."""
    model = model_copy(tmp_path / "m")
    metrics = json.loads((model / "metrics.json").read_text())
    metrics.setdefault("training", {})["split"] = {"train_pool": 100, "test": 50, "dev": 50, "labelled_val": 10}
    (model / "metrics.json").write_text(json.dumps(metrics))
    data = pairs_file(tmp_path, labels=[i % 2 if i < 150 else 0 for i in range(200)])  # dev rows of one label
    config = (model / "config.json").read_bytes()
    refused(dupq("calibrate", str(model), "--data", str(data)), "non-duplicates")
    assert (model / "config.json").read_bytes() == config


def test_blank_and_unsendable_tokens(tmp_path: Path):
    """create_app and `dupq serve` refuse an empty, blank or non-Latin-1 token at start, before anyone can write."""
    from dupq.service.app import create_app

    folder = build(tmp_path / "c", n=10)
    assert [library_refuses(lambda t=t: create_app(folder, token=t)) for t in ("", "   ", "s\u20acret")] == [True] * 3
    for token in ("  ", "s\u20acret"):
        serve = dupq("serve", str(folder), "--port", str(free_port()), timeout=30, env={"DUPQ_API_TOKEN": token})
        refused(serve, "DUPQ_API_TOKEN")


def test_worker_cannot_open_its_collection(tmp_path: Path):
    """`serve --workers 2`, the folder moved, a worker killed: the new worker says one sentence, the server stops with one."""
    folder = build(tmp_path / "c", n=20)
    with Server(folder, "--workers", "2") as server:
        # The server answers once one worker is up: wait for both, or the other one finds the folder gone too.
        deadline = time.monotonic() + 120
        while server.stderr().count("Application startup complete") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        folder.rename(tmp_path / "moved")
        os.kill(server.workers()[0], signal.SIGKILL)
        # A new worker loads the model before it finds the folder gone: slow on a busy machine.
        deadline = time.monotonic() + 240
        while server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped = server.proc.poll() is not None
        err = server.stderr()
    said = [line for line in err.splitlines() if "cannot start" in line]
    assert stopped and server.proc.returncode != 0 and "Traceback" not in err, err[-600:]
    assert len(said) == 1 and str(folder) in said[0], err[-600:]


def test_keyed_retries_compare_values(tmp_path: Path):
    """A keyed retry whose metadata lists the names in another order (or 1.0 for 1) is the same add, in the API and
    `index add --file`; true for 1 is not."""
    folder = build(tmp_path / "c", n=10)
    body = {"text": "How deep is the sea?", "key": "sea-1", "metadata": {"a": 1, "b": [1, 2]}}
    with client(folder) as c:
        post = lambda b: c.post("/questions", json=b, headers=AUTH)  # noqa: E731
        first, same = post(body), post({**body, "metadata": {"b": [1.0, 2], "a": 1.0}})
        other = post({**body, "metadata": {"b": [True, 2], "a": 1}})
    assert [first.status_code, same.status_code, other.status_code] == [201, 201, 409]
    assert same.json()["id"] == first.json()["id"]
    (tmp_path / "a.csv").write_text("key,question,topic,level\nk1,How do I bake bread?,food,1\n")
    (tmp_path / "b.csv").write_text("key,level,topic,question\nk1,1,food,How do I bake bread?\n")
    for name in ("a.csv", "b.csv"):
        clean(dupq("index", "add", str(folder), "--file", str(tmp_path / name), "--key-column", "key"))
    assert len(stored(folder)) == 12


# Questions every entry point refuses in one sentence holding the words given.
BAD_QUESTIONS = {
    "empty": ("", "is empty"),
    "blank": ("   ", "is empty"),
    "no words": ("?!...", "has no words"),
    "not UTF-8": (b"Caf\xe9 question", "is not valid UTF-8"),  # as a shell hands $'Caf\xe9 question' on
    "1,004 characters": (LONG, "1,004 characters long"),
}


@pytest.mark.parametrize("fault", BAD_QUESTIONS)
def test_one_question_rule_on_the_command_line(tmp_path: Path, run, fault):
    """`predict`, `search` and `index add` refuse the question, storing nothing."""
    question, said = BAD_QUESTIONS[fault]
    folder = build(tmp_path / "c", n=10)
    where = str(folder)
    for args in (["predict", question, "How?"], ["search", where, question], ["index", "add", where, question]):
        refused(run(*args), said)
    assert len(stored(folder)) == 10


def test_one_question_rule(tmp_path: Path):
    """A 1,004-character question: refused by the library and the API; a file's line is left out with its reason."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

    folder = build(tmp_path / "c", n=10)
    (tmp_path / "q.txt").write_text(f"How do I fly a kite?\n{LONG}\n")
    built = clean(dupq("index", "build", str(tmp_path / "q.txt"), "--out", str(tmp_path / "b")))
    assert b"too long" in built.stderr and len(stored(tmp_path / "b")) == 1
    with Collection.open(folder) as coll:
        assert library_refuses(lambda: coll.add([LONG]))
    assert library_refuses(lambda: Model.load().similarity(LONG, "How?"))
    with client(folder) as c:
        assert c.post("/search", json={"question": LONG}).status_code == 422
    assert len(stored(folder)) == 10


def test_one_key_rule(tmp_path: Path):
    """A key the API cannot take ("faq 17", a non-ASCII one, 201 characters) is refused by `index add --key` and the
    library, and a file's line with one is left out with its reason."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c", n=10)
    bad = ["faq 17", "cl\u00e9", "k" * 201]
    for key in bad:
        refused(dupq("index", "add", str(folder), "How do I tie a knot?", "--key", key), "key")
    with Collection.open(folder) as coll:
        assert [library_refuses(lambda k=k: coll.add(["How do I tie a knot?"], keys=[k])) for k in bad] == [True] * 3
    (tmp_path / "k.csv").write_text("key,question\nfaq 17,How do I tie a knot?\nfaq-18,How do I untie a knot?\n")
    run = clean(dupq("index", "add", str(folder), "--file", str(tmp_path / "k.csv"), "--key-column", "key"))
    keys = [k for _, k, _ in stored(folder)]
    assert b"line 2" in run.stderr and keys[-1] == "faq-18" and len(keys) == 11


def test_preset_and_teacher_sentences(tmp_path: Path):
    """A preset with a byte-order mark reads; `test_size` suggests `test`; teacher vectors at a file say it is a file."""
    from dupq.core.errors import DupqError
    from dupq.training.distil.teacher import TeacherCache

    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbfepochs = 2\n")
    bom = clean(dupq("train", "--preset", str(tmp_path / "bom.toml"), "--show"))
    assert b"epochs = 2" in bom.stdout
    (tmp_path / "size.toml").write_text("test_size = 100\n")
    refused(dupq("train", "--preset", str(tmp_path / "size.toml"), "--show"), "did you mean 'test'")
    (tmp_path / "hostname").write_text("box\n")
    with pytest.raises(DupqError, match="is a file") as said:
        TeacherCache.load(tmp_path / "hostname")
    assert "teach again" not in str(said.value)


def test_add_says_what_it_stored(tmp_path: Path):
    """`index add --key` run twice stores one question, and the second says nothing was added, not "added 1"."""
    folder = build(tmp_path / "c", n=10)
    runs = [clean(dupq("index", "add", str(folder), "How do I tie a knot?", "--key", "knot")) for _ in range(2)]
    second = runs[1].stdout.decode()
    assert "added 1" in runs[0].stdout.decode()
    assert not second.startswith("added") and "stored already" in second, second
    assert [t for _, _, t in stored(folder)].count("How do I tie a knot?") == 1


def test_adapt_names_skipped_lines(tmp_path: Path):
    """adapt says which lines of its file it left out and why (line numbers, reasons), as index build does."""
    (tmp_path / "q.txt").write_text("How do I cook rice?\nWhy is the sky blue?\n???\nHow do I learn French?\n")
    teacher = str(tmp_path / "no-teacher")
    err = dupq("adapt", str(tmp_path / "q.txt"), "--out", str(tmp_path / "a"), "--teacher", teacher).stderr.decode()
    assert "line 3 (no words)" in err and "Traceback" not in err, err[-600:]
