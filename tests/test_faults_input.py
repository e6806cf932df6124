"""What bad input files and output paths get: one sentence naming the file (or the path the user gave), never
a wrong result, a traceback or a folder nobody asked for.

The byte-order mark, the line cap, repeated header names, keys given twice, a full disk during a build,
a broken Milvus address, spreadsheet formulas in `dedup --out x.csv`, output paths that are folders or
lie in missing folders. Each test goes through a public entry point (the CLI, ``read_questions``,
``read_pairs``, ``atomic_write``), so it also runs against code without the rules and fails there.
"""

from __future__ import annotations

import csv
import io
import os
import random
import resource
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.collection.collection import Collection, KeyConflict
from dupq.core.errors import DupqError
from dupq.core.files import new_folder
from dupq.data.pairs import read_pairs
from dupq.data.questions import read_questions
from dupq.data.tables import RowWriter
from dupq.modeling.model import Model

runner = CliRunner()
BOM = b"\xef\xbb\xbf"
PAIRS = b"How do I learn Python?\tWhat is the best way to learn Python?\nHow old are you?\tWhat is your age?\n"
QUESTIONS = ["How do I learn Python?", "How do I cook rice?", "What is the capital of Mongolia?"]
LONG = 2 << 20  # bytes of an overlong line: twice the cap


def invoke(*args: str, stdin: bytes | None = None):
    return runner.invoke(app, list(args), input=stdin)


def refused(result, *said: str) -> str:
    """The one ``error:`` sentence of a refused command (exit 2, no traceback), checked to hold each of ``said``."""
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and len(errors) == 1, (result.output, result.exception)
    for words in said:
        assert words in errors[0], (words, errors[0])
    return errors[0]


# a UTF-8 byte-order mark is not part of the first line.


@pytest.mark.parametrize("name", ["q.txt", "q.csv", "q.txt.gz"])
def test_a_byte_order_mark_is_not_read_as_text(tmp_path, name):
    import gzip

    body = ("question\n" if name.endswith(".csv") else "") + "\n".join(QUESTIONS) + "\n"
    plain, marked = tmp_path / f"plain-{name}", tmp_path / f"marked-{name}"
    write = gzip.compress if name.endswith(".gz") else bytes
    plain.write_bytes(write(body.encode()))
    marked.write_bytes(write(BOM + body.encode()))
    assert read_questions(marked).texts == read_questions(plain).texts == QUESTIONS


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_predict_judges_the_first_line_of_a_marked_file_as_any_other(tmp_path, via):
    plain, marked = tmp_path / "plain.tsv", tmp_path / "marked.tsv"
    plain.write_bytes(PAIRS)
    marked.write_bytes(BOM + PAIRS)
    if via == "file":
        want, got = invoke("predict", "--pairs", str(plain)), invoke("predict", "--pairs", str(marked))
    else:
        want, got = invoke("predict", "--pairs", "-", stdin=PAIRS), invoke("predict", "--pairs", "-", stdin=BOM + PAIRS)
    assert want.exit_code == got.exit_code == 0, got.output
    assert got.output == want.output and len(got.output.splitlines()) == 2


# a header that names a column twice.


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    (tmp_path / "t.csv").write_text("question,tag,tag\nHow do I cook rice?,a,b\n")
    with pytest.raises(DupqError, match=r"'tag' twice \(columns 2 and 3\)"):
        read_questions(tmp_path / "t.csv")
    (tmp_path / "p.tsv").write_text("id\tquestion1\tquestion2\tis_duplicate\tid\n1\tHow?\tWhy?\t0\t2\n")
    with pytest.raises(DupqError, match=r"'id' twice \(columns 1 and 5\)"):
        read_pairs(tmp_path / "p.tsv")


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


def test_predict_judges_the_lines_before_an_overlong_one_then_refuses_it(tmp_path):
    (tmp_path / "p.tsv").write_bytes(PAIRS + b"x" * LONG)  # no line end: /dev/zero's way
    for args, stdin in (([str(tmp_path / "p.tsv")], None), (["-"], PAIRS + b"x" * LONG)):
        result = invoke("predict", "--pairs", *args, stdin=stdin)
        refused(result, "line 3 of", "longer than 1,048,576 bytes")
        assert [line.split("\t")[0] for line in result.output.splitlines()[:2]] == ["1", "2"]


def naive_lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` without their ``\\n``, the last one even if empty: the reference for the cap."""
    return data.split(b"\n")


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
    too_long = [i + 1 for i, line in enumerate(naive_lines(body)) if len(line) > limit]
    if too_long:
        with pytest.raises(DupqError, match=rf"^line {too_long[0]} of x is longer than {limit} bytes"):
            reader.read()
    else:
        assert reader.read() == body


# a full disk during `index build` (here: a file size limit the database outgrows).


@pytest.mark.slow
def test_a_build_on_a_full_disk_is_one_sentence_and_leaves_nothing(tmp_path):
    (tmp_path / "q.txt").write_text("\n".join(f"How do I learn topic number {i}?" for i in range(3000)) + "\n")

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))  # Python ignores SIGXFSZ: writes fail

    run = subprocess.run(
        [sys.executable, "-m", "dupq.cli", "index", "build", str(tmp_path / "q.txt"), "--out", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert run.returncode == 2 and "Traceback" not in run.stderr and len(errors) == 1, run.stderr
    assert str(tmp_path / "c") in errors[0] and ".building" not in errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.txt"]  # no collection, no hidden half-built one


# a Milvus address that cannot be parsed.


@pytest.mark.parametrize("where", ["milvus+http://[::1?collection=x", "milvus+https://[fe80::1/?collection=x"])
def test_an_unparsable_milvus_address_is_one_sentence(where):
    refused(invoke("search", where, "How do I learn Python?"), "Milvus location", where)


# no spreadsheet formula in `dedup --out x.csv`.

FORMULAS = ['=HYPERLINK("http://x.example","How?")', "+1+1 how?", "-2+3 why?", "@SUM(A1) how?", "\tHow?", "\rWhy?"]


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


# keys given twice in one file, or one add.


def test_a_key_given_twice_in_one_file_is_refused_and_takes_no_id(tmp_path):
    Collection.build(tmp_path / "c", QUESTIONS, Model.load()).close()
    (tmp_path / "k.csv").write_text("key,question\n1,How do I cook pasta?\n2,Why?\n1,How do I boil eggs?\n")
    refused(
        invoke("index", "add", str(tmp_path / "c"), "--file", str(tmp_path / "k.csv"), "--key-column", "key"),
        "'1'",
        "lines 2 and 4",
    )
    added = invoke("index", "add", str(tmp_path / "c"), "How do I bake bread?")
    assert added.exit_code == 0 and "id 3" in added.output, added.output
    with sqlite3.connect(tmp_path / "c" / "questions.sqlite") as db:
        assert [t for (t,) in db.execute("SELECT text FROM questions ORDER BY id")] == [
            *QUESTIONS,
            "How do I bake bread?",
        ]


def test_a_key_given_twice_in_one_add_is_not_called_stored(tmp_path):
    with Collection.build(tmp_path / "c", QUESTIONS, Model.load()) as coll:
        with pytest.raises(KeyConflict) as e:
            coll.add(["How do I cook pasta?", "How do I boil eggs?"], keys=["1", "1"])
        assert "questions 1 and 2" in str(e.value) and "stored already" not in str(e.value)
        assert coll.add(["How do I bake bread?"]) == [3]


# Items 21, 22: output paths. The error names the user's path; a missing folder is not created.


def test_dedup_into_a_folder_names_the_folder_not_a_temporary_file(tmp_path):
    (tmp_path / "q.txt").write_text("\n".join(QUESTIONS) + "\n")
    (tmp_path / "x.jsonl").mkdir()
    error = refused(
        invoke("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "x.jsonl")), str(tmp_path / "x.jsonl")
    )
    assert ".tmp" not in error and list((tmp_path / "x.jsonl").iterdir()) == []


def test_dedup_into_a_missing_folder_is_refused_and_creates_nothing(tmp_path):
    (tmp_path / "q.txt").write_text("\n".join(QUESTIONS) + "\n")
    for name in ("x.jsonl", "x.csv"):
        out = tmp_path / "none" / "dir" / name
        refused(invoke("dedup", str(tmp_path / "q.txt"), "--out", str(out)), str(out.parent), "does not exist")
    assert not (tmp_path / "none").exists()


def test_a_write_the_file_system_refuses_names_the_target(tmp_path, monkeypatch):
    """A read-only folder (simulated: tests may run as root, whom permissions do not stop): the error names
    the file the user asked for, from the library and on the command line, never the temporary file."""
    import dupq.core.files

    model = tmp_path / "model"
    Model.load().save(model)
    (tmp_path / "q.txt").write_text("\n".join(QUESTIONS) + "\n")

    def read_only(prefix, suffix, dir):
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}abc{suffix}"))

    monkeypatch.setattr(dupq.core.files.tempfile, "mkstemp", read_only)
    with pytest.raises(PermissionError) as e:
        Model.load(model).save(model, half=None)  # what `dupq calibrate` does last
    assert e.value.filename == str(model / "model.safetensors")
    error = refused(invoke("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "d.json")), "Permission denied")
    assert str(tmp_path / "d.json") in error and ".tmp" not in error


def test_a_failure_inside_a_new_folder_names_the_file_in_the_folder(tmp_path):
    with pytest.raises(OSError) as e, new_folder(tmp_path / "c") as tmp:
        raise OSError(28, "No space left on device", str(tmp / "index.faiss"))
    assert isinstance(e.value, OSError) and e.value.filename == str(tmp_path / "c" / "index.faiss")
    assert list(tmp_path.iterdir()) == []
