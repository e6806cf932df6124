"""What the lab's commands share: the repository they measure and write into, and the options several take."""

from __future__ import annotations

import argparse
from pathlib import Path

from dupq.data.pairs import default_data_path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"  # the saved measurements the figures are rendered from
SHARED = {
    "model": {"type": Path, "default": None, "help": "model folder (default: the bundled model)"},
    "data": {"type": Path, "default": default_data_path(), "help": "Quora pairs file (default: $DUPQ_DATA or the shared one)"},
    "seed": {"type": int, "default": 0, "help": "random seed (samples of questions)"},
}  # fmt: skip


def add_shared(parser: argparse.ArgumentParser, *names: str) -> None:
    """``--NAME`` for each shared option, as :data:`SHARED` declares it."""
    for name in names:
        parser.add_argument(f"--{name}", **SHARED[name])
