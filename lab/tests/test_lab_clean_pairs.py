"""The script ``dupq-lab clean-pairs`` (the pairs themselves: tests/evaluation/test_clean_pairs.py)."""

from __future__ import annotations

import subprocess
import sys

from support.errors import refused


def test_script_says_one_sentence_for_a_bad_model_folder(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dupq_lab.experiments.clean_pairs", "--model", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    refused(done)
    assert done.stdout == ""
