"""Presets: recipes as TOML files (`dupq train --preset NAME`): read, shown, overridden by flags, refused
in one sentence; the bundled preset is the recipe the bundled model's metrics.json records."""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, fields

import pytest
from typer.testing import CliRunner

import dupq.training.distil.branch as branch
from dupq.cli import app
from dupq.core.errors import DupqError
from dupq.core.options import option_fields
from dupq.data.pairs import SplitConfig
from dupq.modeling.model import BUNDLED
from dupq.training.config import ModelOptions, TrainConfig, renamed
from dupq.training.objectives import Objective
from dupq.training.presets import BRANCH_PRESETS, CONFIGS, LOSS_ARGUMENTS, PRESETS, configs, read_preset, to_toml
from support.errors import refused
from support.kit import ok
from support.train_cli import captured_configs, other_value

runner = CliRunner()


# Ablation options of the bundled run removed since, at the value that turned them off.
REMOVED = dict(
    contrastive_margin=0.5, ema=0.0, bucket=1, bidirectional=False, pooling="mean", head_hidden=256, distil_questions=0
)


def test_bundled_preset_is_the_recipe_that_trained_the_bundled_model():
    recorded = json.loads((BUNDLED / "metrics.json").read_text())["training"]
    built = configs(read_preset("bundled"))
    records = (renamed(recorded["train"]), recorded["options"], recorded["split"])  # "teacher" is teacher_vectors now
    losses = {name: {"weight": weight} for name, weight in records[0].pop("losses").items()}
    for name, loss in LOSS_ARGUMENTS.items():  # options of the bundled run that are a loss's arguments now
        losses[loss][name] = records[0].pop(name)
    assert Objective(losses).parts == built[0].objective().parts
    compared = 0
    for config, record in zip(built, records):
        for name, value in record.items():
            if name in REMOVED:
                assert value == REMOVED[name], name
                continue
            assert getattr(config, name) == value, name  # a field renamed without RENAMED fails here too
            compared += 1
        for f in fields(config):  # fields added since the bundled run: their default is what it ran with
            if f.name not in record and f.name != "losses":
                assert getattr(config, f.name) == f.default, f.name
    assert compared >= 22


def test_labelled_is_the_bundled_recipe_without_its_teacher_and_seed_is_dupq_train_alone():
    labelled, bundled = read_preset("labelled"), read_preset("bundled")
    # the bundled run sliced its batches into 4 LSTM calls, the labelled preset into 16: the same sums in another order
    assert {key for key, value in labelled.items() if bundled[key] != value} == {"chunks", "losses"}
    assert bundled.keys() - labelled.keys() == {"teacher_vectors", "word_init"}
    assert bundled["losses"] == {**labelled["losses"], "distil": 5.0}
    assert configs(read_preset("seed")) == (TrainConfig(), ModelOptions(), SplitConfig())
    shipped = BUNDLED.parents[1].joinpath("training", "presets").glob("*.toml")
    assert {p.stem for p in shipped} == {*PRESETS, *BRANCH_PRESETS}


def test_a_preset_file_extends_another_beside_it(tmp_path):
    (tmp_path / "base.toml").write_text('extends = "labelled"\nepochs = 3\n')
    (tmp_path / "child.toml").write_text('extends = "base.toml"\nlr = 0.02\n[losses]\nbce = 2\n')
    expected = {**read_preset("labelled"), "epochs": 3, "lr": 0.02, "losses": {"bce": 2}}
    assert read_preset(str(tmp_path / "child.toml")) == expected


def _every_option_at_another_value() -> dict:
    values = {f.name: other_value(f) for config in CONFIGS for f in option_fields(config)}
    return {**values, "teacher_vectors": 'runs/"teacher" \\ é', "chunks": 3, "losses": {"distil": 0.5, "bce": 2.0}}


def test_to_toml_writes_what_read_preset_reads_back(tmp_path):
    for values in [*(read_preset(name) for name in PRESETS), _every_option_at_another_value()]:
        path = tmp_path / "p.toml"
        path.write_text(to_toml(values, defaults={"seed": 0}), encoding="utf-8")
        assert read_preset(str(path)) == values
        assert tomllib.loads(to_toml(values)) == values


def test_every_option_without_a_flag_reaches_its_field_from_a_preset(monkeypatch, pairs_path, tmp_path):
    values = _every_option_at_another_value()
    (tmp_path / "all.toml").write_text(to_toml(values), encoding="utf-8")
    seen = captured_configs(monkeypatch, pairs_path, tmp_path, ["--preset", str(tmp_path / "all.toml")])
    got = {**asdict(seen["config"]), **asdict(seen["options"]), **asdict(seen["split"])}
    assert {name: got[name] for name in values} == values
    defaults = {name: getattr(config(), name) for config in CONFIGS for name in values if hasattr(config, name)}
    assert all(defaults[name] != values[name] for name in defaults)


def test_typed_flags_override_the_preset_and_defaults_do_not(monkeypatch, pairs_path, tmp_path):
    seen = captured_configs(monkeypatch, pairs_path, tmp_path, ["--preset", "bundled"])
    assert (seen["config"], seen["options"], seen["split"]) == configs(read_preset("bundled"))  # threads 1, chunks 4
    # --lr 0.01 is the flag's default, typed: it still wins over the preset's 0.005. --loss replaces the table.
    typed = ["--preset", "labelled", "--epochs", "2", "--lr", "0.01", "--threads", "2", "--loss", "bce:0.5"]
    seen = captured_configs(monkeypatch, pairs_path, tmp_path, typed)
    changed = {"epochs": 2, "lr": 0.01, "threads": 2, "losses": {"bce": 0.5}}
    assert (seen["config"], seen["options"], seen["split"]) == configs({**read_preset("labelled"), **changed})


def test_show_prints_what_the_preset_and_the_flags_set_and_trains_nothing(tmp_path):
    out = tmp_path / "m"
    args = [*"train --preset bundled --epochs 2 --lr 0.01 --show --data none --out".split(), str(out)]
    result = ok(*args)
    assert tomllib.loads(result.stdout) == {**read_preset("bundled"), "epochs": 2, "lr": 0.01}
    assert not out.exists()
    shown = set(tomllib.loads(result.stdout))
    unset = [f.name for config in CONFIGS for f in option_fields(config) if f.name not in shown]
    assert unset and all(f"# {name} = " in result.stdout for name in unset)  # the defaults, as comments


@pytest.mark.parametrize(
    "text, named",
    [
        ("dim = 1000000", "dim"),
        ("oov_buckets = 100000000000", "oov_buckets"),
        ("threads = 100000", "threads"),
        ("seed = -1", "seed"),
        ("seed = 123456789012345678", "seed"),
        ("epochs = 0", "epochs"),
        ("lowercase = 'yes'", "lowercase"),
        ("dim = [16]", "dim"),
        ("[losses]\ntriplet = { margin = nan }", "margin"),
        ("[losses]\ntriplet = { reduction = 'max' }", "reduction"),
        ("[losses]\nranking = { margin = 1 }", "margin"),
        ("margin = 0.3", "triplet = { weight = 1.0, margin = 0.3 } in its [losses] table"),
        ('teacher = "runs/teacher"', "teacher_vectors"),  # the old name, as old metrics.json files say it
        ('recipe = "labelled"', "train_on"),
        ("batch_sizes = 32", "batch_size"),
        ("[losses]\nhinge = 1", "hinge"),
        ("[losses]\nbce = -1", "bce"),
        ("losses = 3", "losses"),
        ('extends = "nope"', "nope"),
        ('extends = "p.toml"', "leads back to itself"),
        ("dim = = 3", "not valid TOML"),
    ],
)
def test_preset_mistakes_are_one_sentence(tmp_path, text, named):
    (tmp_path / "p.toml").write_text(text + "\n")
    line = refused(runner.invoke(app, ["train", "--preset", str(tmp_path / "p.toml"), "--show"]))
    assert named in line


def test_unknown_preset_names_the_ones_there_are():
    line = refused(runner.invoke(app, ["train", "--preset", "labeled", "--show"]))
    assert all(name in line for name in PRESETS)
    with pytest.raises(DupqError, match="no preset"):
        read_preset("labelled.yaml")


def _branch_settings(monkeypatch, tmp_path, *args: str) -> tuple[dict, str]:
    """What `dupq distil branch ARGS` would build the branch with (the building itself left out), and what it said."""
    seen = {}

    def record(model, source, dim, a, weight, pieces, teacher, log):
        seen.update(source=source, dim=dim, a=a, weight=weight, pieces=pieces)
        raise DupqError("recorded")

    monkeypatch.setattr(branch, "branch_model", record)
    monkeypatch.setattr("dupq.cli.distil._threads", lambda n: seen.update(threads=n))
    result = runner.invoke(app, ["distil", "branch", *args, "--out", str(tmp_path / "b")])
    return seen, result.output


def test_the_branch_preset_holds_the_bundled_branchs_settings_and_flags_override_it(monkeypatch, tmp_path):
    bundled = {"source": "teacher", "dim": 128, "a": 0.002, "weight": 2.0, "pieces": False, "threads": 0}
    assert _branch_settings(monkeypatch, tmp_path, "--preset", "branch")[0] == bundled
    typed = _branch_settings(monkeypatch, tmp_path, "--preset", "branch", "--weight", "1.5", "--pieces")[0]
    assert typed == {**bundled, "weight": 1.5, "pieces": True}
    assert _branch_settings(monkeypatch, tmp_path)[0]["weight"] == 1.0  # no preset: the flags' defaults
    (tmp_path / "mine.toml").write_text("dim = 64\nepochs = 3\n")
    said = _branch_settings(monkeypatch, tmp_path, "--preset", str(tmp_path / "mine.toml"))[1]
    assert said.startswith("error: the preset") and "'epochs', which is no option of dupq distil branch" in said
    (tmp_path / "bad.toml").write_text("dim = 0\n")
    said = _branch_settings(monkeypatch, tmp_path, "--preset", str(tmp_path / "bad.toml"))[1]
    assert said.startswith("error: the preset") and "dim = 0" in said
    assert "no preset 'labelled'" in _branch_settings(monkeypatch, tmp_path, "--preset", "labelled")[1]
