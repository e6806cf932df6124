"""A model folder's format, and its one reader: ``config.json``, ``metrics.json``, the transformer's files.

A trained model is a folder::

    config.json        format, encoder (type and sizes), head, calibration, threshold, threshold_on,
                       search_calibration (how search hits are judged, in two tiers)
    metrics.json       how it was trained (split, loss per epoch, world size) and what it scored
    vocab.json         the words (:class:`dupq.data.tokenizer.VocabFile`), or instead of it and the weights:
    model.safetensors  the encoder's and the head's weights (read as NumPy arrays: :func:`read_weights`)
    static.safetensors the static branch's word table, when config.json names one (dupq.modeling.static)
    sentence-transformers/   a pretrained sentence encoder, JSON and safetensors only

Everything that reads a model folder reads it here, through the pydantic formats below, so a mistake
in any file is one sentence naming the file and the field; the encoder and head entries are read
straight into the :mod:`dupq.modeling.architecture` configs, whose annotations bound every size.
Keys a format does not know are ignored (a newer dupq may add some).

>>> check_format(ModelConfig, {"format": FORMAT, "encoder": {"vocab_size": 10, "dim": "128"}}, "m/config.json")
Traceback (most recent call last):
dupq.core.errors.DupqError: m/config.json is corrupt: encoder.dim must be an integer from 1 to 4096, not '128'.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from safetensors import SafetensorError
from safetensors.numpy import load_file

from dupq.core.errors import DupqError
from dupq.core.files import check_new_folder, read_json
from dupq.core.formats import MAX_COUNT, MAX_EMBEDDING, check_format, corrupt, inside, integer, number, sentence
from dupq.modeling.architecture import (
    ENCODER_TYPES,
    SENTENCE_TRANSFORMERS,
    EncoderConfig,
    HeadConfig,
    SentenceConfig,
    weight_shapes,
)
from dupq.modeling.judge import PROBABILITY, SEED_THRESHOLD, SIMILARITY
from dupq.modeling.static import StaticConfig

FORMAT = "dupq-model/1"
ROUNDING = 1e-6  # float32 cosines can exceed 1 by an ulp or two, and a threshold chosen among them too
KNOWN = (*ENCODER_TYPES, SENTENCE_TRANSFORMERS)  # every encoder type a config.json may name
RETIRED = ("gru",)  # encoder types of older dupq versions, refused by name
# Calibration numbers beyond this are no fit to dev pairs (the bundled model's are below 2) and would
# overflow the probability; a beta map this steep is a step function anyway.
MAX_CALIBRATION = 1e6
PICKLES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")  # formats that can run code when loaded

Threshold = number(-1.0 - ROUNDING, 1.0 + ROUNDING, "a number from -1 to 1")
_THRESHOLD = TypeAdapter(Threshold)


def check_threshold(value: Any, where: str) -> float:
    """A decision threshold: a finite number in [-1, 1] (a cosine similarity, or a probability)."""
    try:
        return _THRESHOLD.validate_python(value)
    except ValidationError:
        raise DupqError(f"{where} must be a number from -1 to 1, not {value!r}.") from None


class Calibration(BaseModel):
    """The beta map of :func:`dupq.modeling.probability.calibrated`, fitted on dev pairs."""

    method: Literal["beta"] = "beta"
    a: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # weight of ln s
    b: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # weight of -ln(1 - s)
    c: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # offset


class SearchCalibration(BaseModel):
    """How search hits are judged (:func:`dupq.modeling.probability.search_calibrated`) and the two tiers."""

    a: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # weight of ln s
    b: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # weight of -ln(1 - s)
    c: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # offset
    cosine: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # weight of the cosine
    margin: number(-MAX_CALIBRATION, MAX_CALIBRATION)  # weight of the margin over the search's best other hit
    margin_range: tuple[number(-2.0, 2.0), number(-2.0, 2.0)]  # the margins the fit saw; others are clipped to them
    suggest: number(0.0, 1.0)  # a hit whose probability is above it is worth a look
    duplicate: number(0.0, 1.0)  # above it, safe to act on (precision >= 0.95 on the fitting pairs)
    candidates: Annotated[int, Field(ge=1, le=100_000)] | None = None  # as a reranker: how many it orders
    fitted_on: dict | None = None  # the pairs it was fitted on, and its figures there
    fitted_by: str | None = None  # the command that fitted it


def _search(calibration: SearchCalibration | None) -> dict | None:
    """A search calibration as the judge keeps it (``candidates`` only where one was chosen)."""
    if calibration is None:
        return None
    return calibration.model_dump(exclude={"candidates"} if calibration.candidates is None else set())


def _encoder_tag(encoder: Any) -> str:
    """Which format reads an ``encoder`` entry: its type ("lstm" when it names none, or is no object)."""
    return encoder.get("type", "lstm") if isinstance(encoder, dict) else "lstm"


Encoders = Annotated[
    Union[  # noqa: UP007 - a Union built from the registry cannot be written with |
        tuple(Annotated[EncoderConfig, Tag(kind)] for kind in ENCODER_TYPES)
        + (Annotated[SentenceConfig, Tag(SENTENCE_TRANSFORMERS)],)
    ],
    Discriminator(_encoder_tag),
]


class ModelConfig(BaseModel):
    """A model's ``config.json``: the encoder, the pair head, and how pairs are judged."""

    model_config = ConfigDict(frozen=True)

    format: Literal[FORMAT]
    kind: str = "lstm"  # the encoder's type (encoder.type; none: a folder saved before the registry, an LSTM)
    encoder: Encoders  # its config: an EncoderConfig for a registered type, else a SentenceConfig
    head: HeadConfig | None = None  # the pair head (None: the cosine judges pairs)
    calibration: Calibration | None = None  # the beta map to a probability (None: the head's own sigmoid)
    threshold: Threshold = SEED_THRESHOLD  # what score > threshold calls a duplicate
    # which score the threshold applies to (dupq.modeling.verdict)
    threshold_on: Literal[SIMILARITY, PROBABILITY] = SIMILARITY
    threshold_info: dict | None = None  # how the threshold was chosen
    search_calibration: SearchCalibration | None = None  # how search hits are judged, in tiers (None: as pairs are)
    weights_dtype: Literal["float32", "float16"] = "float32"  # how model.safetensors stores the weights
    static: StaticConfig | None = None  # the static branch joined to the vectors (static.safetensors); None: none

    @model_validator(mode="before")
    @classmethod
    def _encoder_type(cls, config: Any) -> Any:
        """Name an unknown encoder type with the known ones; record the type as ``kind``."""
        encoder = config.get("encoder") if isinstance(config, dict) else None
        if not isinstance(encoder, dict):
            return config  # the encoder's own format refuses it
        kind = encoder.get("type", "lstm")
        if kind in RETIRED:
            raise sentence(f"encoder type {kind!r} (encoder.type) is no longer supported; train the model again.")
        if not isinstance(kind, str) or kind not in KNOWN:  # a list or an object as the type is unknown too
            raise sentence(
                f"unknown encoder type {kind!r} (encoder.type); this dupq knows "
                f"{', '.join(map(repr, KNOWN[:-1]))} and {KNOWN[-1]!r}."
            )
        return {**config, "kind": kind}

    @model_validator(mode="after")
    def _sizes_fit(self) -> ModelConfig:
        """The embedding table fits in memory, and the head reads vectors as wide as the encoder's."""
        if isinstance(self.encoder, EncoderConfig):
            rows, dim = self.encoder.vocab_size, self.encoder.dim
            if rows * dim > MAX_EMBEDDING:
                raise corrupt(
                    f"encoder.vocab_size x encoder.dim must be at most {MAX_EMBEDDING:,} (2 GiB of float32), "
                    f"not {rows:,} x {dim:,}"
                )
            if self.head is not None and self.head.dim != self.encoder.out_dim:
                raise corrupt(f"head.dim must be the encoder's width {self.encoder.out_dim}, not {self.head.dim}")
        elif self.static is not None:
            raise corrupt("static names a static branch, which joins an LSTM model, not a sentence-transformers one")
        return self

    def judging(self) -> dict[str, Any]:
        """How pairs are judged, as :class:`~dupq.modeling.judge.Judge`'s keyword arguments (its head aside)."""
        return {
            "threshold": self.threshold,
            "threshold_info": self.threshold_info,
            "calibration": self.calibration.model_dump() if self.calibration is not None else None,
            "threshold_on": self.threshold_on,
            "search_calibration": _search(self.search_calibration),
        }


class _Split(BaseModel):
    train_pool: integer(0, MAX_COUNT) | None = None
    test: integer(0, MAX_COUNT) | None = None
    dev: integer(0, MAX_COUNT) | None = None
    val_fraction: number(1e-9, 1 - 1e-9) | None = None


class _Epoch(BaseModel):
    epoch: integer(0, 2**31)
    train_loss: Annotated[float, Field(strict=True)]  # NaN can be recorded: a diverged epoch is history too
    val_loss: Annotated[float, Field(strict=True)]


class _Training(BaseModel):
    split: _Split | None = None
    history: list[_Epoch] | None = None
    world_size: integer(1, 65536) | None = None  # how many processes trained it (torchrun); absent: one


class Metrics(BaseModel):
    """A model's ``metrics.json``: how it was trained and what it scored (the rest is free-form)."""

    training: _Training | None = None
    calibration: dict | None = None
    test: dict | None = None


class _Kind(BaseModel):
    type: StrictStr = "lstm"


class _Header(BaseModel):
    """The least of a ``config.json`` that says it is a dupq model's, and of what kind."""

    format: Literal[FORMAT]
    encoder: _Kind


def read_config(folder: Path) -> ModelConfig:
    """``folder/config.json`` as a :class:`ModelConfig`, or one sentence."""
    path = folder / "config.json"
    config = read_json(path, f"the model config of {folder}")
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise DupqError(f"{path} is not a dupq model config (format {FORMAT!r} expected).")
    return check_format(ModelConfig, config, path)


def read_weights(folder: Path, config: ModelConfig) -> dict[str, np.ndarray]:
    """``folder/model.safetensors`` as float32 NumPy arrays by name (no torch), or one sentence: the file must hold
    finite floating-point numbers, and exactly the weights, of exactly the shapes, that ``config`` needs
    (:func:`~dupq.modeling.architecture.weight_shapes`); a head's weights are ignored where ``config`` has no head."""
    path = folder / "model.safetensors"
    if not path.is_file():
        raise DupqError(f"the weights of {folder} are missing: {path} does not exist.")
    try:
        weights = load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise DupqError(f"{path} is corrupt ({e}).") from None
    bad = sorted(k for k, v in weights.items() if v.dtype.kind == "f" and not np.isfinite(v).all())
    if bad:
        raise DupqError(f"{path} is corrupt: {bad[0]} holds numbers that are not finite.")
    if config.head is None:  # a config that sets no head judges by the cosine: a head's weights are left unread
        weights = {k: v for k, v in weights.items() if not k.startswith("head.")}
    shapes = weight_shapes(config.kind, config.encoder, config.head)
    stored = {k: v.shape for k, v in weights.items()}
    if stored != shapes:
        raise DupqError(f"{path} does not match {folder / 'config.json'}: {_mismatch(stored, shapes)}.")
    if any(v.dtype.kind != "f" for v in weights.values()):
        raise DupqError(f"{path} is corrupt: its weights must be floating-point numbers.")
    return {k: np.asarray(v, np.float32) for k, v in weights.items()}  # float16 is widened, as torch's .float()


def _mismatch(stored: dict[str, tuple], expected: dict[str, tuple]) -> str:
    """The first difference between the weights a file holds and those its config needs, in words."""
    missing, unexpected = sorted(expected.keys() - stored.keys()), sorted(stored.keys() - expected.keys())
    if missing:
        return f"it lacks {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
    if unexpected:
        return f"it holds {unexpected[0]}, which the config has no place for"
    name = next(k for k in sorted(expected) if stored[k] != expected[k])
    return f"{name} has shape {list(stored[name])}, the config needs {list(expected[name])}"


def read_metrics(folder: Path) -> dict[str, Any]:
    """``folder/metrics.json`` as it is stored (empty when there is none), once :class:`Metrics` holds."""
    path = folder / "metrics.json"
    if not path.exists():
        return {}
    metrics = read_json(path, f"the metrics of {folder}")
    check_format(Metrics, metrics, path)
    return metrics


def stored_kind(folder: Path) -> str | None:
    """The encoder type that ``folder/config.json`` names ("lstm" when it names none) if it is a dupq
    model config, else None; nothing else of the folder is read or checked."""
    try:
        return check_format(_Header, read_json(folder / "config.json", "config.json"), folder).encoder.type
    except DupqError:
        return None


def check_new_model_folder(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that exists (an empty folder aside), unless ``overwrite`` and it is a dupq model folder: the
    rule of every command that writes a model folder (compact, distil teacher-model and branch, adapt, train), over
    :func:`~dupq.core.files.check_new_folder`, the rule of every command that writes a folder. A collection, a
    report or anything else is never replaced."""
    check_new_folder(out, overwrite)
    if out.is_dir() and any(out.iterdir()) and stored_kind(out) is None:
        raise DupqError(
            f"{out} exists and is not a dupq model folder; choose another folder (only a model folder is replaced)."
        )


def transformer_files(folder: Path) -> Path | None:
    """The checked sentence-transformers subfolder of the dupq model folder ``folder``; None when
    ``folder`` is no dupq model folder, or one of another kind."""
    if stored_kind(folder) != SENTENCE_TRANSFORMERS:
        return None
    return check_files(folder / read_config(folder).encoder.folder, folder)


def check_files(files: Path, root: Path | None = None) -> Path:
    """``files`` if it is a saved sentence-transformers model of JSON and safetensors inside the model folder ``root``
    (default: its parent), else one sentence.

    Links are followed: a file or folder that resolves outside ``root`` is refused, and so is any pickle format
    (``.bin``, ``.pt``, ...), by its own name or by the name it resolves to, since loading one can run code.
    """
    root = files.parent if root is None else root
    if not files.is_dir():
        raise DupqError(f"the sentence-transformers model of {root} is missing: {files} is not a folder.")
    for path in _everything(files, root):
        if not inside(path, root):
            raise DupqError(
                f"{path} leads outside the model folder {root} (to {path.resolve()}); a model folder holds its own files."
            )
        if path.suffix.lower() in PICKLES or path.resolve().suffix.lower() in PICKLES:
            link = f" (a link to {path.resolve()})" if path.is_symlink() else ""
            raise DupqError(
                f"{path}{link} is a pickle file, which can run code when loaded; a dupq model folder holds "
                f"JSON and safetensors only (delete the file, or export the model again)."
            )
    if not (files / "modules.json").is_file() or not any(files.rglob("*.safetensors")):
        raise DupqError(
            f"{files} is not a saved sentence-transformers model: it needs modules.json and safetensors weights."
        )
    return files


def _everything(files: Path, root: Path) -> list[Path]:
    """``files`` and every path under it, in order, following links to folders inside ``root`` once each."""
    found, seen, todo = [files], set(), [files]
    while todo:
        folder = todo.pop()
        if not inside(folder, root) or folder.resolve() in seen:
            continue  # refused by the caller, or walked already (a link back up would loop)
        seen.add(folder.resolve())
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            path = Path(entry.path)
            found.append(path)
            if path.is_dir():
                todo.append(path)
    return found
