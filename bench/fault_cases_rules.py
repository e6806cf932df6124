"""Fault cases of the rules every entry point shares: a question, a key, a retry, a bearer token, a dev
split a threshold can be chosen on, a worker that cannot start, and the smaller sentences around them.

Each rule lives in one function (:func:`dupq.data.tokenizer.check_question`,
:func:`dupq.data.questions.check_key`, :func:`dupq.search.rows.same_metadata`,
:func:`dupq.service.app.write_token`, :func:`dupq.evaluation.evaluate.check_dev_labels`); a case
runs it through the command line, the library and the service alike.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import faultkit
from faultkit import Result, Server, build, dupq, free_port, refused, stored, synthetic

LONG = "Why " + "is it so " * 111 + "?"  # 1,004 characters: the API refuses it with 422


def _library_refuses(call) -> bool:
    from dupq.core.files import DupqError

    try:
        call()
    except DupqError:
        return True
    return False


def calibrate_on_a_single_label(tmp: Path) -> Result:
    """`dupq calibrate` on dev pairs of one label refuses in a sentence and leaves the model's threshold as it was."""
    from dupq.modeling.model import BUNDLED

    model = Path(shutil.copytree(BUNDLED, tmp / "m"))
    metrics = json.loads((model / "metrics.json").read_text())
    metrics.setdefault("training", {})["split"] = {"train_pool": 100, "test": 50, "dev": 50, "labelled_val": 10}
    (model / "metrics.json").write_text(json.dumps(metrics))
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    texts = synthetic(400)
    labels = [
        i % 2 if i < 150 else 0 for i in range(200)
    ]  # pool and test rows of both labels, dev rows (150..199) of one
    lines += [f"{i}\t{2 * i}\t{2 * i + 1}\t{texts[2 * i]}\t{texts[2 * i + 1]}\t{labels[i]}" for i in range(200)]
    (tmp / "p.tsv").write_text("\n".join(lines) + "\n")
    config = (model / "config.json").read_bytes()
    ok, traceback = refused(dupq("calibrate", str(model), "--data", str(tmp / "p.tsv")), "non-duplicates")
    return Result(ok and (model / "config.json").read_bytes() == config, tracebacks=traceback)


def blank_and_unsendable_tokens(tmp: Path) -> Result:
    """create_app and `dupq serve` refuse an empty, blank or non-Latin-1 token at start, before anyone can write."""
    from dupq.service.app import create_app

    folder = build(tmp / "c", n=10)
    library = [_library_refuses(lambda t=t: create_app(folder, token=t)) for t in ("", "   ", "s\u20acret")]
    runs, saved = [], faultkit.ENV
    try:
        for token in ("  ", "s\u20acret"):
            faultkit.ENV = {**saved, "DUPQ_API_TOKEN": token}
            runs.append(refused(dupq("serve", str(folder), "--port", str(free_port()), timeout=30), "DUPQ_API_TOKEN"))
    finally:
        faultkit.ENV = saved
    return Result(
        all(library) and all(ok for ok, _ in runs),
        tracebacks=sum(t for _, t in runs),
        detail=f"library {library}, serve {runs}",
    )


def worker_cannot_open_its_collection(tmp: Path) -> Result:
    """`serve --workers 2`, the folder moved, a worker killed: the new worker says one sentence, the server stops with one."""
    folder = build(tmp / "c", n=20)
    with Server(folder, "--workers", "2") as server:
        children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text().split()
        folder.rename(tmp / "moved")
        os.kill(int(children[0]), signal.SIGKILL)
        # A new worker loads the model before it finds the folder gone: slow on a busy machine.
        deadline = time.monotonic() + 240
        while server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped = server.proc.poll() is not None
        err = server.stderr()
    said = [line for line in err.splitlines() if "cannot start" in line]
    return Result(
        stopped and len(said) == 1 and str(folder) in said[0] and server.proc.returncode != 0,
        tracebacks=int("Traceback" in err),
        detail=err[-400:],
    )


def keyed_retries_compare_values(tmp: Path) -> Result:
    """A keyed retry whose metadata lists the names in another order (or 1.0 for 1) is the same add, in the API and
    `index add --file`; true for 1 is not."""
    from fastapi.testclient import TestClient

    from dupq.service.app import create_app

    folder = build(tmp / "c", n=10)
    body = {"text": "How deep is the sea?", "key": "sea-1", "metadata": {"a": 1, "b": [1, 2]}}
    with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as client:
        post = lambda b: client.post("/questions", json=b, headers={"Authorization": "Bearer t"})  # noqa: E731
        first, same = post(body), post({**body, "metadata": {"b": [1.0, 2], "a": 1.0}})
        other = post({**body, "metadata": {"b": [True, 2], "a": 1}})
    api = first.status_code == 201 and same.status_code == 201 and same.json()["id"] == first.json()["id"]
    api = api and other.status_code == 409
    (tmp / "a.csv").write_text("key,question,topic,level\nk1,How do I bake bread?,food,1\n")
    (tmp / "b.csv").write_text("key,level,topic,question\nk1,1,food,How do I bake bread?\n")
    runs = [
        dupq("index", "add", str(folder), "--file", str(tmp / f), "--key-column", "key") for f in ("a.csv", "b.csv")
    ]
    cli = all(r.returncode == 0 for r in runs) and len(stored(folder)) == 12
    return Result(
        api and cli,
        tracebacks=sum(b"Traceback" in r.stderr for r in runs),
        server_500s=sum(r.status_code >= 500 for r in (first, same, other)),
        detail=f"api {[r.status_code for r in (first, same, other)]}, cli {[r.returncode for r in runs]}",
    )


def one_question_rule(tmp: Path) -> Result:
    """A 1,004-character question: refused by index add, search, predict, the library and the API; a file's line is
    left out with its reason."""
    from fastapi.testclient import TestClient

    from dupq.modeling.model import Model
    from dupq.search.collection import Collection
    from dupq.service.app import create_app

    folder = build(tmp / "c", n=10)
    runs = [
        dupq("index", "add", str(folder), LONG),
        dupq("search", str(folder), LONG),
        dupq("predict", LONG, "How?"),
    ]
    results = [refused(r, "1,000") for r in runs]
    (tmp / "q.txt").write_text(f"How do I fly a kite?\n{LONG}\n")
    built = dupq("index", "build", str(tmp / "q.txt"), "--out", str(tmp / "b"))
    with Collection.open(folder) as coll:
        library = [
            _library_refuses(lambda: coll.add([LONG])),
            _library_refuses(lambda: Model.load().similarity(LONG, "How?")),
        ]
    with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as client:
        api = client.post("/search", json={"question": LONG}).status_code
    ok = all(r for r, _ in results) and all(library) and api == 422 and len(stored(folder)) == 10
    ok = ok and built.returncode == 0 and b"too long" in built.stderr and len(stored(tmp / "b")) == 1
    return Result(ok, tracebacks=sum(t for _, t in results), detail=f"{results}, library {library}, api {api}")


def one_key_rule(tmp: Path) -> Result:
    """A key the API cannot take ("faq 17", a non-ASCII one, 201 characters) is refused by `index add --key` and the
    library, and a file's line with one is left out with its reason."""
    from dupq.search.collection import Collection

    folder = build(tmp / "c", n=10)
    bad = ["faq 17", "cl\u00e9", "k" * 201]
    results = [refused(dupq("index", "add", str(folder), "How do I tie a knot?", "--key", k), "key") for k in bad]
    with Collection.open(folder) as coll:
        library = [_library_refuses(lambda k=k: coll.add(["How do I tie a knot?"], keys=[k])) for k in bad]
    (tmp / "k.csv").write_text("key,question\nfaq 17,How do I tie a knot?\nfaq-18,How do I untie a knot?\n")
    run = dupq("index", "add", str(folder), "--file", str(tmp / "k.csv"), "--key-column", "key")
    keys = [k for _, k, _ in stored(folder)]
    ok = all(r for r, _ in results) and all(library) and run.returncode == 0 and b"line 2" in run.stderr
    return Result(
        ok and keys[-1] == "faq-18" and len(keys) == 11,
        tracebacks=sum(t for _, t in results) + int(b"Traceback" in run.stderr),
        detail=f"{results}, library {library}",
    )


def preset_and_teacher_sentences(tmp: Path) -> Result:
    """A preset with a byte-order mark reads; `test_size` suggests `test`; teacher vectors at a file say it is a file."""
    from dupq.core.files import DupqError
    from dupq.training.distil.teacher import TeacherCache

    (tmp / "bom.toml").write_bytes(b"\xef\xbb\xbfepochs = 2\n")
    bom = dupq("train", "--preset", str(tmp / "bom.toml"), "--show")
    (tmp / "size.toml").write_text("test_size = 100\n")
    size = refused(dupq("train", "--preset", str(tmp / "size.toml"), "--show"), "did you mean 'test'")
    (tmp / "hostname").write_text("box\n")
    try:
        TeacherCache.load(tmp / "hostname")
        said = ""
    except DupqError as e:
        said = str(e)
    ok = bom.returncode == 0 and b"epochs = 2" in bom.stdout and size[0]
    ok = ok and "is a file" in said and "teach again" not in said
    return Result(ok, tracebacks=int(b"Traceback" in bom.stderr) + size[1], detail=f"{bom.stderr[-200:]!r} {said}")


def add_says_what_it_stored(tmp: Path) -> Result:
    """`index add` of a key stored already says nothing was added, not "added 1 question"."""
    folder = build(tmp / "c", n=10)
    runs = [dupq("index", "add", str(folder), "How do I tie a knot?", "--key", "knot") for _ in range(2)]
    second = runs[1].stdout.decode()
    ok = all(r.returncode == 0 for r in runs) and "added 1" in runs[0].stdout.decode()
    return Result(ok and not second.startswith("added") and "stored already" in second, detail=second.strip())


def adapt_names_skipped_lines(tmp: Path) -> Result:
    """adapt says which lines of its file it left out and why (line numbers, reasons), as index build does."""
    (tmp / "q.txt").write_text("How do I cook rice?\nWhy is the sky blue?\n???\nHow do I learn French?\n")
    run = dupq("adapt", str(tmp / "q.txt"), "--out", str(tmp / "a"), "--teacher", str(tmp / "no-teacher"))
    err = run.stderr.decode()
    return Result("line 3 (no words)" in err, tracebacks=int("Traceback" in err), detail=err[-300:])


CASES = [
    calibrate_on_a_single_label,
    blank_and_unsendable_tokens,
    worker_cannot_open_its_collection,
    keyed_retries_compare_values,
    one_question_rule,
    one_key_rule,
    preset_and_teacher_sentences,
    add_says_what_it_stored,
    adapt_names_skipped_lines,
]
