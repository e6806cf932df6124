"""Faults in what users hand dupq and where they ask it to write: a byte-order mark, a header naming a column
twice, an endless line, a full disk during a build, a broken Milvus address, spreadsheet formulas, keys given
twice, output paths that are folders or lie in missing folders, and torchrun ranks given other options.

A fault met through the CLI runs both ways (the ``run`` fixture); the rule under it is checked through the library
too. A command that reads without bound runs in a subprocess with its memory capped (1 GiB of data), so that code
without the line cap fails in seconds with a MemoryError instead of taking the machine's memory.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import faultkit
import pytest
from faultkit import TRAIN, build, clean, in_process, model_copy, pairs_file, stored, synthetic

from dupq.collection.collection import Collection, KeyConflict
from dupq.core.errors import DupqError
from dupq.core.files import new_folder
from dupq.data.pairs import read_pairs
from dupq.data.questions import read_questions
from dupq.data.tables import RowWriter
from dupq.modeling.model import Model
from support.errors import refused

pytestmark = pytest.mark.faults

BOM = b"\xef\xbb\xbf"
LINE_CAP = "longer than 1,048,576 bytes"
LONG = 2 << 20  # bytes of an overlong line: twice the cap
PAIRS = b"How do I learn Python?\tWhat is the best way to learn Python?\nHow old are you?\tWhat is your age?\n"
MILVUS = ["milvus+http://[::1?collection=x", "milvus+https://[fe80::1/?collection=x"]  # unclosed IPv6 brackets


def limited(*args: str, data: int = 1 << 30, file_size: int | None = None, stdin: bytes | None = None):
    """``dupq *args`` in a subprocess with its memory (and the size of any file it writes) capped."""

    def caps() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        if file_size is not None:  # Python ignores SIGXFSZ: a write past the cap fails as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    command = [*faultkit.DUPQ, *args]
    return subprocess.run(command, input=stdin, capture_output=True, timeout=180, env=faultkit.ENV, preexec_fn=caps)


@pytest.mark.parametrize("name", ["q.txt", "q.csv", "q.txt.gz"])
def test_a_byte_order_mark_is_not_read_as_text(tmp_path, name):
    questions = synthetic(3)
    body = ("question\n" if name.endswith(".csv") else "") + "\n".join(questions) + "\n"
    plain, marked = tmp_path / f"plain-{name}", tmp_path / f"marked-{name}"
    write = gzip.compress if name.endswith(".gz") else bytes
    plain.write_bytes(write(body.encode()))
    marked.write_bytes(write(BOM + body.encode()))
    assert read_questions(marked).texts == read_questions(plain).texts == questions


def test_byte_order_mark(tmp_path: Path, run):
    """a file (or standard input) starting with a UTF-8 byte-order mark reads as the same without one."""
    questions = ("\n".join([*synthetic(3), synthetic(1)[0]]) + "\n").encode()
    outputs = {}
    for name, mark in (("plain", b""), ("marked", BOM)):
        (tmp_path / f"{name}.tsv").write_bytes(mark + PAIRS)
        text = tmp_path / f"{name}.txt"
        text.write_bytes(mark + questions)
        clean(run("index", "build", str(text), "--out", str(tmp_path / name)))
        outputs[name] = [
            run("predict", "--pairs", str(tmp_path / f"{name}.tsv")).stdout,
            run("predict", "--pairs", "-", stdin=mark + PAIRS).stdout,
            run("search", str(tmp_path / "plain"), "--queries", str(text), "--json", "-k", "1").stdout,
            run("dedup", str(text), "--out", str(tmp_path / f"{name}.json")).returncode,
            json.loads((tmp_path / f"{name}.json").read_text()),
            [text for _, _, text in stored(tmp_path / name)],
        ]
    assert len(outputs["plain"][0].splitlines()) == 2 and outputs["plain"] == outputs["marked"]


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    (tmp_path / "t.csv").write_text("question,tag,tag\nHow do I cook rice?,a,b\n")
    with pytest.raises(DupqError, match=r"'tag' twice \(columns 2 and 3\)"):
        read_questions(tmp_path / "t.csv")
    (tmp_path / "p.tsv").write_text("id\tquestion1\tquestion2\tis_duplicate\tid\n1\tHow?\tWhy?\t0\t2\n")
    with pytest.raises(DupqError, match=r"'id' twice \(columns 1 and 5\)"):
        read_pairs(tmp_path / "p.tsv")


def test_repeated_header_names(tmp_path: Path, run):
    """`question,tag,tag` is refused (one tag would be dropped), by every command that reads a table."""
    (tmp_path / "t.csv").write_text("question,tag,tag\nHow do I cook rice?,a,b\nHow do I boil eggs?,c,d\n")
    folder = build(tmp_path / "c")
    said = "names the column 'tag' twice (columns 2 and 3)"
    refused(run("index", "build", str(tmp_path / "t.csv"), "--out", str(tmp_path / "new")), said)
    refused(run("index", "add", str(folder), "--file", str(tmp_path / "t.csv")), said)
    refused(run("dedup", str(tmp_path / "t.csv"), "--out", str(tmp_path / "d.json")), said)


# a line longer than the cap ends the read with one sentence naming the line.


@pytest.mark.parametrize("name", ["q.txt", "q.csv", "p.tsv"])
def test_an_overlong_line_is_refused_with_its_number(tmp_path, name):
    path = tmp_path / name
    header = {"q.txt": b"", "q.csv": b"question\n", "p.tsv": b"question1\tquestion2\tis_duplicate\n"}[name]
    row = b"How?\tWhy?\t1\n" if name == "p.tsv" else b"How do I learn Python?\n"
    path.write_bytes(header + row + row + b"x" * LONG + b"\n" + row)
    read = read_pairs if name == "p.tsv" else read_questions
    number = 3 if name == "q.txt" else 4
    with pytest.raises(DupqError, match=rf"line {number} of .*{name} is longer than 1,048,576 bytes"):
        read(path)


def test_predict_judges_the_lines_before_an_overlong_one_then_refuses_it(tmp_path, run):
    (tmp_path / "p.tsv").write_bytes(PAIRS + b"x" * LONG)  # no line end: /dev/zero's way
    for args, stdin in (([str(tmp_path / "p.tsv")], None), (["-"], PAIRS + b"x" * LONG)):
        result = run("predict", "--pairs", *args, stdin=stdin)
        refused(result, "line 3 of", LINE_CAP)
        assert [line.split(b"\t")[0] for line in result.stdout.splitlines()[:2]] == [b"1", b"2"]


def test_endless_line(tmp_path: Path):
    """/dev/zero (no line end, ever) for every reader: refused at 1 MiB, memory capped at 1 GiB."""
    folder = build(tmp_path / "c")
    zero = "/dev/zero"
    refused(limited("predict", "--pairs", zero), "line 1 of /dev/zero is " + LINE_CAP)
    refused(limited("predict", "--pairs", "-", stdin=b"How?\tWhy?\n" + b"\0" * (2 << 20)), "line 2 of standard input")
    refused(limited("index", "build", zero, "--out", str(tmp_path / "new")), LINE_CAP)
    refused(limited("index", "add", str(folder), "--file", zero), LINE_CAP)
    refused(limited("dedup", zero, "--out", str(tmp_path / "d.json")), LINE_CAP)
    refused(limited("search", str(folder), "--queries", zero), LINE_CAP)


class Trickle(io.RawIOBase):
    """A source that hands out at most a few bytes at a time, as a pipe may."""

    def __init__(self, data: bytes, rng: random.Random):
        self.data, self.at, self.rng = data, 0, rng

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.rng.randint(1, 9), len(self.data) - self.at)
        buffer[:n] = self.data[self.at : self.at + n]
        self.at += n
        return n


@pytest.mark.parametrize("seed", range(300))
def test_the_cap_and_the_mark_against_a_naive_reference(seed):
    from dupq.data.text import _CheckedBytes

    rng = random.Random(seed)
    limit = rng.randint(1, 12)
    lines = [bytes(rng.choice(b"ab\r") for _ in range(rng.randint(0, limit + 2))) for _ in range(rng.randint(1, 6))]
    body = b"\n".join(lines)
    data = (BOM if rng.random() < 0.5 else b"") + body
    reader = io.BufferedReader(_CheckedBytes(io.BufferedReader(Trickle(data, rng), 4), "x", limit), 8)
    # the naive reference: every line without its \n (the last even if empty), its length against the cap
    too_long = [i + 1 for i, line in enumerate(body.split(b"\n")) if len(line) > limit]
    if too_long:
        with pytest.raises(DupqError, match=rf"^line {too_long[0]} of x is longer than {limit} bytes"):
            reader.read()
    else:
        assert reader.read() == body


def test_index_build_on_a_full_disk(tmp_path: Path):
    """the database outgrows the space (a 256 KiB file size cap): one sentence, no folder left behind."""
    (tmp_path / "q.txt").write_text("\n".join(synthetic(3000)) + "\n")
    built = limited("index", "build", str(tmp_path / "q.txt"), "--out", str(tmp_path / "c"), file_size=256 << 10)
    assert ".building" not in refused(built, str(tmp_path / "c"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.txt"]  # no collection, no hidden half-built one


@pytest.mark.parametrize("where", MILVUS)
def test_unparsable_milvus_address(tmp_path: Path, run, where):
    """an unclosed IPv6 bracket wherever a collection is named."""
    (tmp_path / "q.txt").write_text("How do I learn Python?\n")
    said = "the Milvus location " + where
    refused(run("search", where, "How do I learn Python?"), said)
    refused(run("index", "add", where, "How do I learn Python?"), said)
    refused(run("index", "build", str(tmp_path / "q.txt"), "--out", where), said)


FORMULAS = ['=HYPERLINK("http://x.example","How do I learn Python?")', "+1+1 how do I add?", "-2+3 why?"]
FORMULAS += ["@SUM(A1) how do I sum?", "\tHow do I indent?", "\rWhy do I return?"]


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(tmp_path):
    texts = [*FORMULAS, "How do I -x?", "What is 2+2?"]
    keys = ["=1+1", "+k", "-k", "@k", "\tk", "\rk", "k", "k2"]
    with open(tmp_path / "d.csv", "wb") as f, RowWriter(f, "csv", ["id", "text"]) as w:
        w.write([{"id": k, "text": t} for k, t in zip(keys, texts)])
    with open(tmp_path / "d.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))

    def reference(cell: str) -> str:  # OWASP: a leading ' for = + - @ tab CR, anything else as it is
        return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell

    assert [r["text"] for r in rows] == [reference(t) for t in texts]
    assert [r["id"] for r in rows] == [reference(k) for k in keys]


def test_formulas_in_dedup_csv(tmp_path: Path, run):
    """`dedup --out x.csv` never writes a cell a spreadsheet would run (=, +, -, @, tab, CR first)."""
    with open(tmp_path / "q.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "question"])
        for i, text in enumerate(FORMULAS * 2):  # each twice: a cluster of duplicates, written out
            writer.writerow([f"=key{i}", text])
    clean(run("dedup", str(tmp_path / "q.csv"), "--out", str(tmp_path / "d.csv")))
    with open(tmp_path / "d.csv", newline="", encoding="utf-8") as f:
        cells = [row["text"] for row in csv.DictReader(f)]
    assert [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))] == []
    assert sorted(c.removeprefix("'") for c in cells) == sorted(FORMULAS * 2)


def test_duplicate_keys_in_one_file(tmp_path: Path, run):
    """`1,cook pasta` / `1,boil eggs` in one `index add --file`: refused naming the key and both lines; no id taken."""
    folder = build(tmp_path / "c")
    (tmp_path / "k.csv").write_text("key,question\n1,How do I cook pasta?\n2,Why?\n1,How do I boil eggs?\n")
    add = run("index", "add", str(folder), "--file", str(tmp_path / "k.csv"), "--key-column", "key")
    refused(add, "'1'", "lines 2 and 4")
    after = run("index", "add", str(folder), "How do I bake bread?")
    assert b"id 40" in after.stdout and [i for i, _, _ in stored(folder)] == list(range(41))
    assert [text for _, _, text in stored(folder)] == [*synthetic(40), "How do I bake bread?"]


def test_a_key_given_twice_in_one_add_is_not_called_stored(tmp_path):
    questions = synthetic(3)
    with Collection.build(tmp_path / "c", questions, Model.load()) as coll:
        with pytest.raises(KeyConflict) as e:
            coll.add(["How do I cook pasta?", "How do I boil eggs?"], keys=["1", "1"])
        assert "questions 1 and 2" in str(e.value) and "stored already" not in str(e.value)
        assert coll.add(["How do I bake bread?"]) == [3]


# output paths: the error names the user's path; a missing folder is not created.


@pytest.mark.parametrize("name", ["x.json", "x.jsonl", "x.csv"])
@pytest.mark.parametrize("where", ["a folder", "a missing folder"])
def test_dedup_out_where_no_file_can_go(tmp_path: Path, run, where, name):
    """`dedup --out` naming a folder, or a file in a folder that does not exist: refused naming the user's path,
    never a temporary file; nothing is written and no folder created."""
    (tmp_path / "q.txt").write_text("\n".join(synthetic(4)) + "\n")
    folder = where == "a folder"
    out = tmp_path / name if folder else tmp_path / "none" / "dir" / name
    if folder:
        out.mkdir()
    said = str(out) if folder else f"{out.parent} does not exist"
    assert ".tmp" not in refused(run("dedup", str(tmp_path / "q.txt"), "--out", str(out)), said)
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["q.txt", name] if folder else ["q.txt"])


def test_a_write_the_file_system_refuses_names_the_target(tmp_path, monkeypatch):
    """A read-only folder (simulated: tests may run as root, whom permissions do not stop): the error names the
    file the user asked for, from the library and from `calibrate` and `dedup`, never the temporary file."""
    import dupq.core.files

    model = model_copy(tmp_path / "model")
    metrics = json.loads((model / "metrics.json").read_text())
    metrics.setdefault("training", {})["split"] = {"train_pool": 400, "test": 100, "dev": 100}  # pairs_file's rows
    (model / "metrics.json").write_text(json.dumps(metrics))
    data = pairs_file(tmp_path)
    (tmp_path / "q.txt").write_text("\n".join(synthetic(3)) + "\n")

    def read_only(prefix, suffix, dir):
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}abc{suffix}"))

    monkeypatch.setattr(dupq.core.files.tempfile, "mkstemp", read_only)
    with pytest.raises(PermissionError) as e:
        Model.load(model).save(model, half=None)  # what `dupq calibrate` does last
    assert e.value.filename == str(model / "model.safetensors")
    errors = [
        refused(in_process("calibrate", model, "--data", data), str(model / "model.safetensors")),
        refused(in_process("dedup", tmp_path / "q.txt", "--out", tmp_path / "d.json"), str(tmp_path / "d.json")),
    ]
    assert not [e for e in errors if ".tmp" in e or "Permission denied" not in e], errors


def test_a_failure_inside_a_new_folder_names_the_file_in_the_folder(tmp_path):
    with pytest.raises(OSError) as e, new_folder(tmp_path / "c") as tmp:
        raise OSError(28, "No space left on device", str(tmp / "index.faiss"))
    assert isinstance(e.value, OSError) and e.value.filename == str(tmp_path / "c" / "index.faiss")
    assert list(tmp_path.iterdir()) == []


RANK_ONE = """import os, sys
from dupq.cli import main
common, _, rank1 = " ".join(sys.argv[1:]).partition(" -- ")
sys.argv = ["dupq", "train", *common.split(), *(rank1.split() if os.environ.get("RANK") == "1" else [])]
main()
"""


@pytest.mark.parametrize("option, value", [("--seed", "3"), ("--batch-size", "16"), ("--epochs", "3")])
def test_ranks_given_other_options(tmp_path: Path, option, value):
    """torchrun with rank 1 given another --seed (diverging replicas), --batch-size (a gloo error) or --epochs
    (a hang): every rank stops at the start with one sentence naming the option, within a minute."""
    (tmp_path / "ranks.py").write_text(RANK_ONE)
    logs = tmp_path / "logs"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["--log-dir", str(logs), "--redirects", "3", str(tmp_path / "ranks.py")]
    command += ["--data", str(pairs_file(tmp_path)), "--out", str(tmp_path / "out"), "--epochs", "2", *TRAIN]
    command += ["--", option, value]
    started = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=faultkit.ENV, start_new_session=True
    )
    try:
        code = proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the workers too
        code = proc.wait()
    seconds = time.monotonic() - started
    errors = [p.read_text(errors="replace") for p in sorted(logs.rglob("stderr.log"))]
    assert code != 0 and seconds < 60, f"exit {code} after {seconds:.0f}s"
    assert len(errors) == 2 and all(f"error: rank 1 has another {option} than rank 0" in e for e in errors), errors
    assert not any("Traceback" in e for e in errors)
