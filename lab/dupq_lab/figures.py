"""Reading what a saved measurement printed: docs/results/NAME, ``[{"command": ..., "output": [line, ...]}, ...]``.

The table scripts of bench/ render the docs' figures from these files; this is the one reader they share.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def saved_output(name: str | Path) -> list[str]:
    """The lines the last command of a saved file printed (``name`` in docs/results/, or a path)."""
    return json.loads((RESULTS / name).read_text())[-1]["output"]


def last_json(name: str | Path) -> dict:
    """The last line the last command of a saved file printed, as JSON."""
    return json.loads(saved_output(name)[-1])


def every_json(name: str | Path) -> list[dict]:
    """The last line each command of a saved file printed, as JSON: one per run, in the file's order."""
    return [json.loads(entry["output"][-1]) for entry in json.loads((RESULTS / name).read_text())]
