"""Helpers for the CLI tests: a slice of a pairs file (in a pytest temporary folder), and a model `dupq train`
trained on it."""

from __future__ import annotations

import gzip
from pathlib import Path

import torch
from typer.testing import CliRunner

from dupq.cli import app

ROWS = 10_000  # pool 8,000 (~2,950 duplicates in the synthetic file) + test 1,000 + dev 1,000
SPLIT_ARGS = ["--train-pool", "8000", "--test-size", "1000", "--dev-size", "1000"]
_cache: dict[str, tuple[Path, Path]] = {}


def slice_file(source: Path, folder: Path, rows: int = ROWS) -> Path:
    """The header and the first ``rows`` rows of a gzipped pairs file (one line a row), as a plain .tsv in ``folder``."""
    out = folder / "slice.tsv"
    with gzip.open(source, "rt", encoding="utf-8", newline="") as f, open(out, "w", encoding="utf-8", newline="") as g:
        for i, line in enumerate(f):
            if i > rows:
                break
            g.write(line)
    return out


def cli_model(source: Path, tmp_path_factory) -> tuple[Path, Path]:
    """``(model folder, data slice)``: `dupq train` for one epoch at width 32 on a slice of ``source`` (a few seconds)."""
    if "model" not in _cache:
        folder = tmp_path_factory.mktemp("cli-model")
        data = slice_file(source, folder)
        out = folder / "model"
        before = torch.get_num_threads()  # --threads 1 is faster here, but must not leak into other tests
        try:
            args = ["--epochs", "1", "--dim", "32", "--threads", "1", "--no-progress", *SPLIT_ARGS]
            result = CliRunner().invoke(app, ["train", "--data", str(data), "--out", str(out), *args])
        finally:
            torch.set_num_threads(before)
        assert result.exit_code == 0, result.output
        _cache["model"] = (out, data)
    return _cache["model"]
