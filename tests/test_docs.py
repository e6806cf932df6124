"""The figures in README.md and docs/ are what the repository's scripts print (``make figures`` writes them).

Tables, and console blocks whose commands train or time things (``<!-- regenerate: saved FILE -->``),
are rendered from the committed inputs in docs/results/ and must match exactly: nothing is measured
again, so there is no noise to allow for (``make measurements`` reruns those commands and rewrites
the inputs). Console blocks whose commands are quick and deterministic (the bundled model's
answers) are run again and must print what the docs show, up to float noise: the same text, and
numbers within a relative 1e-6 or one unit of their last printed digit (another CPU sums in
another order).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/RESULTS.md"]


def check(only: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "bench/update_docs.py", *DOCS, "--check", "--only", only],
        cwd=REPO,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("only", ["dupq predict", "one_shot.py"])
def test_tables_and_the_bundled_models_answers_match_the_docs(only):
    done = check(only)  # tables are always re-rendered; console blocks only where a command contains `only`
    assert done.returncode == 0, (
        f"the docs differ from what the scripts print; run `make figures` ({done.stderr[-500:]})"
    )


@pytest.mark.real_data
def test_the_bundled_models_evaluation_matches_the_docs(data_path):
    done = check("dupq evaluate --json")
    assert done.returncode == 0, (
        f"the docs differ from `dupq evaluate --json`; run `make figures` ({done.stderr[-500:]})"
    )


@pytest.mark.parametrize(
    ("before", "after", "same"),
    [
        (
            "ece 0.006982351734 of [0.0259021012, 4138]",
            "ece 0.006982351856 of [0.0259021011, 4138]",
            True,
        ),  # summed in another order
        ("probability 0.7264 > 0.4517", "probability 0.7265 > 0.4517", True),  # rounded to the next 4th digit
        ("probability 0.7264 > 0.4517", "probability 0.7266 > 0.4517", False),
        ("confusion [[5543, 841]]", "confusion [[5543, 842]]", False),  # counts are exact
        ("accuracy 0.8617", "accuracy 0.8617 (dev)", False),  # the text between numbers is exact
        ("recall 0.95", "recall 0.9500003", True),
        ("recall 0.95", "recall 0.9612", False),  # beyond one unit of the 2nd digit
    ],
)
def test_the_check_allows_float_noise_and_nothing_else(before, after, same):
    sys.path.insert(0, str(REPO / "bench"))
    from update_docs import same_within_noise

    assert same_within_noise(before, after) is same


def test_the_check_fails_when_a_figure_was_typed(tmp_path):
    readme = (REPO / "README.md").read_text()
    changed = readme.replace("\nprobability 0.", "\nprobability 9.", 1)  # the first answer of a `dupq predict` block
    assert changed != readme
    (tmp_path / "README.md").write_text(changed)
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench/update_docs.py"),
            str(tmp_path / "README.md"),
            "--check",
            "--only",
            "dupq predict",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1


def test_a_saved_block_is_written_from_its_results_file_and_measured_again_on_demand(tmp_path):
    results = tmp_path / "echo.json"
    doc = tmp_path / "DOC.md"
    doc.write_text(f"<!-- regenerate: saved {results} -->\n```console\n$ echo measured\nstale\n```\n")

    def update(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(REPO / "bench/update_docs.py"), str(doc), *flags],
            cwd=REPO,
            capture_output=True,
            text=True,
        )

    assert update("--check").returncode == 1 and not results.exists()  # nothing measured yet: the check fails
    assert update("--measure").returncode == 0
    assert json.loads(results.read_text()) == [{"command": "echo measured", "output": ["measured"]}]
    assert doc.read_text().splitlines()[2:4] == ["$ echo measured", "measured"]
    assert update("--check").returncode == 0
    results.write_text(
        json.dumps([{"command": "echo measured", "output": ["typed"]}])
    )  # the inputs changed, the doc did not
    assert update("--check").returncode == 1
    assert update().returncode == 0 and "typed" in doc.read_text()
