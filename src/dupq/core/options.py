"""Config fields that are also command-line options, declared once.

A config dataclass (:class:`~dupq.training.config.TrainConfig`, :class:`~dupq.training.config.ModelOptions`,
:class:`~dupq.data.pairs.SplitConfig`) declares each field that ``dupq train`` exposes with
:func:`option`: its default, its ``--help`` text, its choices and range. The command line builds
its options from these fields (``dupq.cli.common.config_options``) and the dataclass checks the same
choices and range in ``__post_init__`` (:func:`check_options`), so a value a command line
would refuse is refused from Python too, in the same words. A field made with plain ``field``
(``TrainConfig.chunks``) is not an option.

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     pooling: str = option("mean", "mean or max over the LSTM's outputs.", choices=("mean", "max"))
...     def __post_init__(self):
...         check_options(self)
>>> Demo("min")
Traceback (most recent call last):
dupq.core.files.DupqError: --pooling must be one of mean, max, not 'min'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import Field, field, fields
from typing import Any

from dupq.core.files import DupqError


def option(
    default: Any,
    help: str,
    *,
    choices: Iterable[str] | None = None,
    min: float | None = None,
    max: float | None = None,
    flag: str | None = None,
) -> Any:
    """A dataclass field that is a command-line option: ``default``, its ``help`` text, the values it takes.

    ``flag`` names the option when ``--field-name`` would not (``SplitConfig.test`` is ``--test-size``).
    """
    meta = {
        "help": help,
        "choices": tuple(choices) if choices is not None else None,
        "min": min,
        "max": max,
        "flag": flag,
    }
    return field(default=default, metadata=meta)


def is_option(f: Field) -> bool:
    return "help" in f.metadata


def flag(f: Field) -> str:
    """The option's name on the command line: ``--oov-buckets`` for the field ``oov_buckets``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def option_fields(config: Any) -> list[Field]:
    """The fields of a config dataclass (or an instance of one) that are command-line options, in order."""
    return [f for f in fields(config) if is_option(f)]


def check_options(config: Any) -> None:
    """Refuse a field's value outside its choices or range: one sentence naming the option."""
    for f in option_fields(config):
        value, meta = getattr(config, f.name), f.metadata
        if meta["choices"] is not None and value not in meta["choices"]:
            raise DupqError(f"{flag(f)} must be one of {', '.join(meta['choices'])}, not {value!r}.")
        if meta["min"] is not None and value < meta["min"]:
            raise DupqError(f"{flag(f)} must be >= {meta['min']}, not {value}.")
        if meta["max"] is not None and value > meta["max"]:
            raise DupqError(f"{flag(f)} must be <= {meta['max']}, not {value}.")
