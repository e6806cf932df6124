"""The suites' conftest (the repository's conftest.py): what it adds to pytest's report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_make_test_says_when_the_distil_tests_were_skipped_and_why(tmp_path):
    """conftest.py prints one line after pytest's summary of skips when the distil extra is missing."""
    (tmp_path / "test_teacher_like.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.skip(reason='the distil extra is not installed (pip install -e .[distil])')\n"
        "def test_needs_the_teacher():\n    pass\n\n"
        "@pytest.mark.skip(reason='something else')\n"
        "def test_other():\n    pass\n"
    )
    path = os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("distil tests skipped")]
    assert len(lines) == 1 and "(1)" in lines[0] and ".[distil]" in lines[0], done.stdout[-1000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("2 skipped")  # pytest's own summary stays the last line
