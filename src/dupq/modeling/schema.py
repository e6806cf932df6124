"""What the JSON files dupq reads must hold: one check per file, one sentence per mistake.

Every file dupq reads back (a model's ``config.json`` and ``metrics.json``, a collection's
``manifest.json``) passes through one of these functions right after it is parsed, so that a
wrong type or an out-of-range value anywhere becomes a :class:`DupqError` naming the file and the
field, instead of a traceback later, deep in the code that uses it (a ``"128"`` as a width, a
string where an object belongs, an HNSW graph with ``-3`` links per vector). Each returns the
object it was given, unchanged; keys it does not know are left alone (newer writers may add some).

>>> check_model_config({"format": "dupq-model/1", "encoder": {"vocab_size": 10, "dim": "128"}}, "m/config.json")
Traceback (most recent call last):
dupq.core.files.DupqError: m/config.json is corrupt: encoder.dim must be an integer from 1 to 65536, not '128'.
"""

from __future__ import annotations

import os
from typing import Any

from dupq.core.files import DupqError
from dupq.modeling.encoders import ENCODERS, SENTENCE_TRANSFORMERS

FilePath = str | os.PathLike


def _fail(path: FilePath, field: str, wanted: str, value: Any) -> None:
    raise DupqError(f"{path} is corrupt: {field} must be {wanted}, not {value!r}.")


def _object(obj: Any, path: FilePath, field: str, optional: bool = False) -> dict:
    if obj is None and optional:
        return {}
    if not isinstance(obj, dict):
        _fail(path, field, "a JSON object", obj)
    return obj


def _int(obj: dict, key: str, path: FilePath, field: str, lo: int, hi: int, optional: bool = False) -> None:
    if key not in obj and optional:
        return
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        _fail(path, field + key, f"an integer from {lo} to {hi}", value)


def _number(obj: dict, key: str, path: FilePath, field: str, lo: float, hi: float, optional: bool = False) -> None:
    if key not in obj and optional:
        return
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:  # NaN fails too
        _fail(path, field + key, f"a number from {lo} to {hi}", value)


def _choice(obj: dict, key: str, path: FilePath, field: str, choices: tuple, optional: bool = False) -> None:
    if key not in obj and optional:
        return
    if obj.get(key) not in choices or isinstance(obj.get(key), bool) != isinstance(choices[0], bool):
        _fail(path, field + key, " or ".join(map(repr, choices)), obj.get(key))


ROUNDING = 1e-6  # float32 cosines can exceed 1 by an ulp or two, and a threshold chosen among them too


def check_threshold(value: Any, where: str) -> float:
    """A decision threshold: a finite number in [-1, 1] (a cosine similarity, or a probability)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 - ROUNDING <= value <= 1.0 + ROUNDING:
        raise DupqError(f"{where} must be a number from -1 to 1, not {value!r}.")
    return float(value)


def check_model_config(config: Any, path: FilePath) -> dict:
    """A model's ``config.json``: the encoder's type, sizes and switches, the threshold and how it was chosen."""
    config = _object(config, path, "the file")
    encoder = _object(config.get("encoder"), path, "encoder")
    kind = encoder.get("type", "lstm")  # no type: a folder saved before the registry, an LSTM
    known = (*ENCODERS, SENTENCE_TRANSFORMERS)
    if kind not in known:  # a tuple: a list or an object as the type is unknown too, not a TypeError
        raise DupqError(
            f"{path}: unknown encoder type {kind!r} (encoder.type); this dupq knows "
            f"{', '.join(map(repr, known[:-1]))} and {known[-1]!r}."
        )
    if kind == SENTENCE_TRANSFORMERS:
        _check_sentence_encoder(encoder, path)
    else:
        _int(encoder, "vocab_size", path, "encoder.", 2, 2**31 - 1)
        _int(encoder, "dim", path, "encoder.", 1, 65536, optional=True)
        _choice(encoder, "bidirectional", path, "encoder.", (False, True), optional=True)
        _number(encoder, "dropout", path, "encoder.", 0.0, 0.99, optional=True)
    if "threshold" in config:
        try:
            check_threshold(config["threshold"], "threshold")
        except DupqError:
            _fail(path, "threshold", "a number from -1 to 1", config["threshold"])
    _object(config.get("threshold_info"), path, "threshold_info", optional=True)
    _choice(config, "weights_dtype", path, "", ("float32", "float16"), optional=True)
    return config


def _check_sentence_encoder(encoder: dict, path: FilePath) -> None:
    """A sentence-transformers model's encoder entry: its width, and the subfolder (a plain name inside the model folder)."""
    _int(encoder, "dim", path, "encoder.", 1, 65536)
    if encoder.get("max_seq_length") is not None:  # None: the transformer sets no limit
        _int(encoder, "max_seq_length", path, "encoder.", 1, 2**20)
    folder = encoder.get("folder")
    if not isinstance(folder, str) or not folder or folder.startswith(".") or "/" in folder or "\\" in folder:
        _fail(path, "encoder.folder", "the name of a subfolder of the model folder", folder)
    if not isinstance(encoder.get("name", ""), str):
        _fail(path, "encoder.name", "a string", encoder.get("name"))


def check_metrics(metrics: Any, path: FilePath) -> dict:
    """A model's ``metrics.json``: how it was trained (split, loss per epoch) and what it scored."""
    metrics = _object(metrics, path, "the file")
    training = _object(metrics.get("training"), path, "training", optional=True)
    if training.get("split") is not None:
        split = _object(training["split"], path, "training.split")
        for key in ("train_pool", "test", "dev"):
            _int(split, key, path, "training.split.", 0, 2**62, optional=True)
        _number(split, "val_fraction", path, "training.split.", 1e-9, 1 - 1e-9, optional=True)
    history = training.get("history")
    if history is not None:
        if not isinstance(history, list):
            _fail(path, "training.history", "a list of epochs", history)
        for i, epoch in enumerate(history):
            epoch = _object(epoch, path, f"training.history[{i}]")
            _int(epoch, "epoch", path, f"training.history[{i}].", 0, 2**31)
            for key in ("train_loss", "val_loss"):
                if not isinstance(epoch.get(key), (int, float)) or isinstance(epoch.get(key), bool):
                    _fail(path, f"training.history[{i}].{key}", "a number", epoch.get(key))
    for key in ("calibration", "test"):
        _object(metrics.get(key), path, key, optional=True)
    return metrics
