"""The fault tests' one fixture: a command of the CLI run both ways a user's input reaches it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from faultkit import dupq, in_process

# test_mutations.py imports fault tests kept beside what they test, in tests/collection and tests/service, by name.
sys.path += [str(Path(__file__).parents[1] / folder) for folder in ("collection", "service")]


@pytest.fixture(params=["in-process", "subprocess"])
def run(request):
    """``run(*args, stdin=...)``: ``dupq *args`` through ``CliRunner`` here or as a user runs it, in a subprocess."""
    return in_process if request.param == "in-process" else dupq
