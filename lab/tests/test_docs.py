"""The figures in README.md and docs/ are what the repository's scripts print (``make figures`` writes them).

Tables, and console blocks whose commands train or time things (``<!-- regenerate: saved FILE -->``),
are rendered from the committed inputs in docs/results/ and must match exactly: nothing is measured
again, so there is no noise to allow for (``make measurements`` reruns those commands and rewrites
the inputs). Console blocks whose commands are quick and deterministic (the bundled model's
answers) are run again and must print what the docs show, up to float noise: the same text, and
numbers within a relative 1e-6 or one unit of their last printed digit (another CPU sums in
another order). Blocks whose commands read the Quora file (``<!-- regenerate: data -->``) are
checked by the ``real_data`` test, and kept as they are without the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dupq_lab.update_docs import MARK, doc_files, same_within_noise

REPO = Path(__file__).resolve().parents[2]


def update_docs(*args: str, data: Path | None = None) -> subprocess.CompletedProcess:
    """``dupq-lab figures`` with ``args``; ``data`` is where it is told the Quora file is (default: as dupq finds it)."""
    env = {**os.environ, **({"DUPQ_DATA": str(data)} if data else {})}
    return subprocess.run(
        [sys.executable, "-m", "dupq_lab", "figures", *args], cwd=REPO, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("only", ["dupq predict", "one_shot.py", "quickstart.py"])
def test_tables_and_the_bundled_models_answers_match_the_docs(only, tmp_path):
    # Tables and saved blocks are always re-rendered; console blocks only where a command contains `only`.
    # No data file here (a path that does not exist): these blocks must not need it.
    done = update_docs("--check", "--only", only, data=tmp_path / "no-data.tsv")
    assert done.returncode == 0, (
        f"the docs differ from what the scripts print; run `make figures` ({done.stderr[-800:]})"
    )


@pytest.mark.real_data
def test_the_blocks_that_read_the_quora_file_match_the_docs(data_path):
    done = update_docs("--check", "--only", "dupq evaluate", data=data_path)
    assert done.returncode == 0, f"the docs differ from `dupq evaluate`; run `make figures` ({done.stderr[-800:]})"
    assert "kept as it is" not in done.stderr  # the blocks were run, not skipped


def test_every_page_with_a_figure_is_one_that_make_figures_updates():
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True).stdout.split()
    pages = [REPO / p for p in tracked] or list(REPO.rglob("*.md"))  # no git (an unpacked archive): every page
    marked = {p for p in pages if p.is_file() and any(MARK.match(line.strip()) for line in p.read_text().splitlines())}
    assert marked, "no page holds a <!-- regenerate --> mark"
    assert marked <= set(doc_files())


def test_the_docs_name_no_machine_paths():
    """The docs and their saved outputs say "the 2-core CPU VM" or "a lent H100", never a machine's own folders."""
    pages = [*doc_files(), *sorted((REPO / "docs" / "results").iterdir())]
    found = [
        f"{page.relative_to(REPO)}: {m.group()}"
        for page in pages
        for m in re.finditer(r"(?<![\w.])/(?:work|root|home|tmp|mnt)/[^\s\"'`)]*", page.read_text())
    ]
    assert not found, found


@pytest.mark.parametrize(
    ("before", "after", "same"),
    [  # summed in another order, the tenth digit moves:
        ("ece 0.006982351734 of [0.0259021012, 4138]", "ece 0.006982351856 of [0.0259021011, 4138]", True),
        ("probability 0.7264 > 0.4517", "probability 0.7265 > 0.4517", True),  # rounded to the next 4th digit
        ("probability 0.7264 > 0.4517", "probability 0.7266 > 0.4517", False),
        ("confusion [[5543, 841]]", "confusion [[5543, 842]]", False),  # counts are exact
        ("accuracy 0.8617", "accuracy 0.8617 (dev)", False),  # the text between numbers is exact
        ("recall 0.95", "recall 0.9500003", True),
        ("recall 0.95", "recall 0.9612", False),  # beyond one unit of the 2nd digit
        ("loss 1.2e-05", "loss 1.3e-05", True),  # one unit of the last digit of 1.2e-05 is 1e-06
        ("loss 1.2e-05", "loss 1.4e-05", False),  # not 0.1, as the digits after the point alone would say
        ("mean 123456.7", "mean 123456.8", True),
        ("mean 1234567", "mean 1234568", False),  # an integer is a count: exact
    ],
)
def test_the_check_allows_float_noise_and_nothing_else(before, after, same):
    assert same_within_noise(before, after) is same


def test_the_check_fails_when_a_figure_was_typed(tmp_path):
    readme = (REPO / "README.md").read_text()
    changed = readme.replace("\nprobability 0.", "\nprobability 9.", 1)  # the first answer of a `dupq predict` block
    assert changed != readme
    (tmp_path / "README.md").write_text(changed)
    assert update_docs(str(tmp_path / "README.md"), "--check", "--only", "dupq predict").returncode == 1


def test_a_block_that_reads_the_data_is_kept_without_it_and_run_with_it(tmp_path):
    doc = tmp_path / "DOC.md"
    doc.write_text("<!-- regenerate: data -->\n```console\n$ echo measured\nstale\n```\n")
    missing = update_docs(str(doc), "--check", data=tmp_path / "no-data.tsv")
    assert missing.returncode == 0 and "kept as it is" in missing.stderr and "no-data.tsv" in missing.stderr
    data = tmp_path / "pairs.tsv"
    data.write_text("")
    assert update_docs(str(doc), "--check", data=data).returncode == 1  # run: "measured" is not "stale"
    assert update_docs(str(doc), data=data).returncode == 0
    assert doc.read_text().splitlines()[2:4] == ["$ echo measured", "measured"]


def test_a_saved_block_is_written_from_its_results_file_and_measured_again_on_demand(tmp_path):
    results = tmp_path / "echo.json"
    doc = tmp_path / "DOC.md"
    doc.write_text(f"<!-- regenerate: saved {results} -->\n```console\n$ echo measured\nstale\n```\n")

    assert update_docs(str(doc), "--check").returncode == 1 and not results.exists()  # nothing measured yet
    assert update_docs(str(doc), "--measure").returncode == 0
    assert json.loads(results.read_text()) == [{"command": "echo measured", "output": ["measured"]}]
    assert doc.read_text().splitlines()[2:4] == ["$ echo measured", "measured"]
    assert update_docs(str(doc), "--check").returncode == 0
    results.write_text(json.dumps([{"command": "echo measured", "output": ["typed"]}]))  # the inputs changed
    assert update_docs(str(doc), "--check").returncode == 1
    assert update_docs(str(doc)).returncode == 0 and "typed" in doc.read_text()


def test_a_block_measured_on_the_gpu_machine_is_kept_on_one_without_a_gpu(tmp_path, monkeypatch):
    results = tmp_path / "echo_device.json"
    results.write_text(json.dumps([{"command": "echo here", "output": ["there"]}]))
    doc = tmp_path / "DOC.md"
    doc.write_text(f"<!-- regenerate: saved {results} -->\n```console\n$ echo here\nthere\n```\n")
    bare = tmp_path / "bin"  # a PATH with no nvidia-smi, whatever this machine has
    bare.mkdir()
    for tool in ("bash", "echo"):
        (bare / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", f"{bare}:{Path(sys.executable).parent}")

    done = update_docs(str(doc), "--measure")
    assert done.returncode == 0 and "no GPU" not in done.stdout and "has none" in done.stderr
    assert json.loads(results.read_text())[0]["output"] == ["there"]  # not measured again here
    other = tmp_path / "echo.json"
    other.write_text(results.read_text())
    doc.write_text(doc.read_text().replace(str(results), str(other)))
    assert update_docs(str(doc), "--measure").returncode == 0
    assert json.loads(other.read_text())[0]["output"] == ["here"]  # a plain saved block is measured again
