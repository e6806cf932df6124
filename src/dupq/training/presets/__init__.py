"""Recipes as files: a preset is a TOML file of training options, ``dupq train --preset NAME``.

A preset sets fields of :class:`~dupq.training.config.TrainConfig`, :class:`~dupq.training.config.ModelOptions` and
:class:`~dupq.data.pairs.SplitConfig` by name, and the losses as a ``[losses]`` table (name = weight, or an inline table
of ``weight`` and the loss's arguments); a field left out keeps its default. ``extends = "NAME"`` starts from another
preset (a name, or a path beside the file), as ``bundled`` adds the teacher to ``labelled``:

.. code-block:: toml

    extends = "labelled"
    teacher_vectors = "runs/teacher"
    [losses]
    bce = 1.0
    distil = 5.0

Three ship (``PRESETS``): ``seed`` (``dupq train``'s defaults), ``labelled`` and ``bundled`` (the bundled model's
recipe). A preset may set options that have no flag (``train_on``, a loss's arguments), so a file is the one way to
state a whole recipe; a typed flag overrides it. ``dupq distil branch --preset branch`` reads ``branch.toml``
(``BRANCH_PRESETS``) with :func:`read_options`.

>>> train, model, split = configs(read_preset("labelled"))
>>> train.train_on, model.head, train.losses["triplet"]
('labelled', 'mlp', {'weight': 1.0, 'reduction': 'mean', 'symmetric': True})
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any, get_type_hints

from dupq.core.errors import DupqError
from dupq.core.options import KINDS, of_kind
from dupq.data.pairs import SplitConfig
from dupq.training.config import RENAMED, ModelOptions, TrainConfig

PRESETS = ("seed", "labelled", "bundled")
BRANCH_PRESETS = ("branch",)  # `dupq distil branch --preset`: the bundled model's static branch
CONFIGS = (TrainConfig, ModelOptions, SplitConfig)  # the dataclasses a preset's keys belong to
KEYS = {f.name: config for config in CONFIGS for f in fields(config)}  # field name -> its dataclass
_HINTS = {name: kind for config in CONFIGS for name, kind in get_type_hints(config).items()}  # field name -> type
_DEPTH = 8  # `extends` chains longer than this are a loop
# Options that became a loss's arguments (dupq.training.objectives): a preset that sets one is told where it went.
LOSS_ARGUMENTS = {"margin": "triplet", "reduction": "triplet", "symmetric": "triplet", "scale": "ranking"}


def preset_path(name: str, beside: Path | None = None, shipped: tuple[str, ...] = PRESETS) -> Path:
    """The file of a packaged preset (``labelled``, one of ``shipped``), or a ``.toml`` path (relative to ``beside``'s folder)."""
    if name in shipped:
        return Path(str(resources.files(__package__) / f"{name}.toml"))
    path = Path(name)
    if beside is not None and not path.is_absolute():
        path = beside.parent / path
    if path.suffix != ".toml" or not path.is_file():
        raise DupqError(f"no preset {name!r}: give one of {', '.join(shipped)}, or the path of a .toml file.")
    return path


def _load(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark (Windows') is no TOML error
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise DupqError(f"the preset {path} is not valid TOML ({e}).") from None


def read_options(name: str, shipped: tuple[str, ...]) -> dict[str, Any]:
    """A preset of another command than ``dupq train`` (``branch``, one of ``shipped``, or a .toml file):
    option name -> value, as written; the command checks the names and values as it checks its flags."""
    return _load(preset_path(name, shipped=shipped))


def read_preset(name: str, beside: Path | None = None, _depth: int = 0) -> dict[str, Any]:
    """The options a preset sets, ``extends`` applied: field name -> value (``losses``: name -> weight).

    Unknown keys and values of the wrong kind are refused here, naming the file; ranges and
    choices when the configs are built (:func:`configs`), as for a typed flag.
    """
    path = preset_path(name, beside)
    values = _load(path)
    base = values.pop("extends", None)
    for key in values:
        _check_key(path, key, values[key])
    if base is None:
        return values
    if not isinstance(base, str) or _depth >= _DEPTH:
        raise DupqError(f"the preset {path} extends {base!r}, which is not a preset or leads back to itself.")
    return {**read_preset(base, path, _depth + 1), **values}


def _suggestion(key: str) -> str | None:
    """The option a mistyped ``key`` most likely meant: one it begins with (``test_size``: ``test``),
    else the closest spelling."""
    within = [name for name in KEYS if key.startswith(name + "_") or key.endswith("_" + name)]
    return max(within, key=len) if within else next(iter(difflib.get_close_matches(key, KEYS, n=1)), None)


def _check_key(path: Path, key: str, value: Any) -> None:
    """Refuse a key that names no option, or a value of another kind than its field's."""
    if key == "losses":
        from dupq.training.objectives import Objective  # torch: imported when a preset names losses, not by the CLI

        if not isinstance(value, dict) or not all(of_kind(w, float) or isinstance(w, dict) for w in value.values()):
            raise DupqError(f"the preset {path} sets losses to {value!r}; write a [losses] table of name = weight.")
        try:
            Objective(value)
        except ValueError as e:
            raise DupqError(f"the preset {path}: {e}.") from None
        return
    if key in LOSS_ARGUMENTS:
        loss = LOSS_ARGUMENTS[key]
        raise DupqError(
            f"the preset {path} sets {key!r}, an argument of the {loss} loss now: "
            f"write {loss} = {{ weight = 1.0, {key} = {_value(value)} }} in its [losses] table."
        )
    if key not in KEYS:
        hint = RENAMED.get(key) or _suggestion(key)
        raise DupqError(
            f"the preset {path} sets {key!r}, which is no training option"
            + (f"; did you mean {hint!r}?" if hint else ".")
        )
    kind = _HINTS[key]
    if kind in KINDS and not of_kind(value, kind):
        raise DupqError(f"the preset {path} sets {key} to {value!r}; it takes {KINDS[kind]}.")


def configs(values: dict[str, Any]) -> tuple[TrainConfig, ModelOptions, SplitConfig]:
    """The three configs with ``values`` (a preset's, flags merged in) set and every other field at its default.

    A float option given as a whole number (``lr = 1``) is a float, as a typed ``--lr 1`` is.
    """
    values = {k: float(v) if _HINTS.get(k) is float and of_kind(v, float) else v for k, v in values.items()}
    if "losses" in values:
        values["losses"] = {n: w if isinstance(w, dict) else float(w) for n, w in values["losses"].items()}
    built = [config(**{k: v for k, v in values.items() if KEYS.get(k) is config}) for config in CONFIGS]
    return built[0], built[1], built[2]


def to_toml(values: dict[str, Any], defaults: dict[str, Any] | None = None) -> str:
    """``values`` as a preset file that :func:`read_preset` reads back; ``defaults`` follow as comments.

    Only the kinds a preset holds are written (text, numbers, true/false, the ``[losses]``
    table); a TOML string is written as JSON writes one, which TOML reads the same.
    """
    lines = [f"{key} = {_value(value)}" for key, value in values.items() if key != "losses"]
    lines += [f"# {key} = {_value(value)}" for key, value in (defaults or {}).items() if key != "losses"]
    if "losses" in values:
        lines += ["", "[losses]", *(f"{name} = {_value(weight)}" for name, weight in values["losses"].items())]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):  # a loss's table: { weight = 1.0, reduction = "mean" }
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, float):
        return repr(value)  # 0.005, 1e-05, 5.0: TOML floats (never inf or nan here: the configs refuse them)
    return json.dumps(value)
