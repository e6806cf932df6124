"""Config fields that are also command-line options, declared once.

A config dataclass declares each field that a command exposes with :func:`option` (default, ``--help`` text, choices,
range); the command line builds its options from these fields (``dupq.cli.common.config_options``) and the dataclass
checks the same choices and range in ``__post_init__`` (:func:`check_options`), so Python is refused what a command line
would be, in the same words. ``cli=False``: an option of the config (a preset sets it, ``--show`` prints it) without a
flag. A plain ``field`` is not an option.

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     pooling: str = option("mean", "mean or max over the LSTM's outputs.", choices=("mean", "max"))
...     def __post_init__(self):
...         check_options(self)
>>> Demo("min")
Traceback (most recent call last):
dupq.core.errors.DupqError: --pooling must be one of mean, max, not 'min'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import Field, field, fields
from typing import Any, get_type_hints

from dupq.core.errors import DupqError


def option(
    default: Any,
    help: str,
    *,
    choices: Iterable[str] | None = None,
    min: float | None = None,
    max: float | None = None,
    flag: str | None = None,
    cli: bool = True,
) -> Any:
    """A dataclass field that is a command-line option: ``default``, its ``help`` text, the values it takes.

    ``flag`` names the option when ``--field-name`` would not (``SplitConfig.test`` is ``--test-size``);
    ``cli=False`` leaves it off the command line (settable from a preset file and from Python).
    """
    meta = dict(help=help, choices=None if choices is None else tuple(choices), min=min, max=max, flag=flag, cli=cli)
    return field(default=default, metadata=meta)


def is_option(f: Field) -> bool:
    return "help" in f.metadata


def flag(f: Field) -> str:
    """The option's name on the command line: ``--teacher-vectors`` for the field ``teacher_vectors``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def option_fields(config: Any) -> list[Field]:
    """The fields of a config dataclass (or an instance of one) that are options, in order."""
    return [f for f in fields(config) if is_option(f)]


def flag_fields(config: Any) -> list[Field]:
    """The option fields that have a command-line flag (not ``cli=False``), in order."""
    return [f for f in option_fields(config) if f.metadata["cli"]]


def label(f: Field) -> str:
    """How a message names the option: its flag, or for a field without one (``cli=False``) its preset key."""
    return flag(f) if f.metadata["cli"] else f.name


KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a text"}


def of_kind(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of ``kind`` (one of ``KINDS``' types): an int counts as a float, a bool as neither."""
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return kind is not str or isinstance(value, str)


def check_options(config: Any) -> None:
    """Refuse a field's value of another type, or outside its choices or range: one sentence naming the option.

    The type matters where a value comes from a preset file or Python rather than a typed flag
    (``dropout = "high"``); a bool is no number here, although Python counts it as one.
    """
    hints = get_type_hints(type(config))
    for f in option_fields(config):
        value, meta, kind = getattr(config, f.name), f.metadata, hints[f.name]
        if kind in KINDS and not of_kind(value, kind):
            raise DupqError(f"{label(f)} must be {KINDS[kind]}, not {value!r}.")
        if meta["choices"] is not None and value not in meta["choices"]:
            raise DupqError(f"{label(f)} must be one of {', '.join(meta['choices'])}, not {value!r}.")
        if meta["min"] is not None and value < meta["min"]:
            raise DupqError(f"{label(f)} must be >= {meta['min']}, not {value}.")
        if meta["max"] is not None and value > meta["max"]:
            raise DupqError(f"{label(f)} must be <= {meta['max']:,}, not {value}.")
