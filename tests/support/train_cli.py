"""What the tests of `dupq train`'s options share: a value other than an option's default, and the configs
`dupq train` would train with (the training call replaced, so nothing is trained)."""

from __future__ import annotations

from typer.testing import CliRunner

from dupq.cli import app
from dupq.core.errors import DupqError
from support.errors import refused


def other_value(f):
    """A value of an option field other than its default, inside its choices and range."""
    meta = f.metadata
    if meta["choices"]:
        return next(c for c in meta["choices"] if c != f.default)
    if isinstance(f.default, bool):
        return not f.default
    if isinstance(f.default, str):
        return "elsewhere"
    value = f.default + (1 if isinstance(f.default, int) else 0.25)
    return value if meta["max"] is None else min(value, meta["max"])


def captured_configs(monkeypatch, pairs_path, tmp_path, args: list[str]) -> dict:
    """Run `dupq train ARGS` up to the training call and return the configs it was given (nothing is trained)."""
    import dupq.data.pairs
    import dupq.training.train

    seen = {}

    def split_pairs(pairs, split):
        seen["split"] = split
        return None

    def train(splits, out, config, options, **_):
        seen.update(config=config, options=options)
        raise DupqError("captured")

    monkeypatch.setattr(dupq.data.pairs, "split_pairs", split_pairs)
    monkeypatch.setattr(dupq.training.train, "train", train)
    result = CliRunner().invoke(app, ["train", "--data", str(pairs_path), "--out", str(tmp_path / "m"), *args])
    assert "captured" in refused(result)
    return seen
