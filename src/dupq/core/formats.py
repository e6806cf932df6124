"""Reading the JSON files dupq writes: one loader, pydantic formats, one sentence per mistake.

Every file dupq reads back has a pydantic format, declared beside the code that uses it, and is
read through :func:`read_format` or :func:`check_format`: a wrong type or an out-of-range value
anywhere is one :class:`DupqError` sentence naming the file and the field, not a traceback deep in
the code that uses it. :func:`integer`, :func:`number` and :func:`checked` carry their own wording
(``m/config.json is corrupt: encoder.dim must be an integer from 1 to 4096, not '128'.``). The
sizes a file may ask for are bounded so that loading one cannot exhaust memory before any weight is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from dupq.core.errors import DupqError
from dupq.core.files import read_json

FilePath = str | os.PathLike
Format = TypeVar("Format", bound=BaseModel)

# The largest sizes a stored file may ask for; every one also bounds what a loaded model allocates.
MAX_DIM = 4096  # encoder width: an LSTM holds 8 dim^2 weights per direction, 0.5 GiB (float32) at 4096
MAX_OUT_DIM = 2 * MAX_DIM  # a vector's width: a bidirectional encoder's, or a sentence-transformers model's
MAX_VOCAB = 2**22  # embedding rows (words + unknown-word buckets): 4,194,304, ~40x Quora's whole vocabulary
MAX_EMBEDDING = 2**29  # rows x width of the embedding table: 2 GiB of float32 (MAX_VOCAB rows at width 128)
MAX_HIDDEN = 16384  # a pair head's hidden width: (2 x 8192 + 1) x 16384 weights, 1 GiB of float32 at most
MAX_TOKENS = 4096  # words kept per question: a batch of 1,024 such questions at width 128 is 2 GiB
MAX_COUNT = 2**62  # rows, pairs, vectors: any count a file records


def integer(lo: int, hi: int) -> Any:
    """The type of a JSON integer from ``lo`` to ``hi`` (not a float, a string or a boolean)."""
    return Annotated[int, Field(strict=True, ge=lo, le=hi), wanted(f"an integer from {lo} to {hi}")]


def number(lo: float, hi: float, words: str | None = None) -> Any:
    """The type of a finite JSON number from ``lo`` to ``hi`` (an integer is one too; a boolean is not)."""
    return Annotated[
        float, Field(strict=True, ge=lo, le=hi, allow_inf_nan=False), wanted(words or f"a number from {lo:g} to {hi:g}")
    ]


def checked(kind: type, test: Callable[[Any], bool], words: str) -> Any:
    """The type of a strict ``kind`` (str, list, ...) for which ``test`` holds, described as ``words``."""

    def check(value: Any) -> Any:
        if not test(value):
            raise PydanticCustomError("wanted", words)
        return value

    return Annotated[kind, Field(strict=True), AfterValidator(check), wanted(words)]


def wanted(words: str) -> WrapValidator:
    """A validator that rewords any failure of the type it wraps as ``must be <words>``."""

    def reword(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("wanted", words) from None

    return WrapValidator(reword)


def corrupt(words: str) -> PydanticCustomError:
    """An error a format's own validator raises: ``<file> is corrupt: <words>.``"""
    return PydanticCustomError("corrupt", "{words}", {"words": words})


def sentence(words: str) -> PydanticCustomError:
    """An error a format's own validator raises whole: ``<file>: <words>``."""
    return PydanticCustomError("sentence", "{words}", {"words": words})


def read_format(fmt: type[Format], path: FilePath, what: str) -> Format:
    """The JSON file ``path`` as ``fmt``, or one :class:`DupqError` sentence (``what`` names the
    file when it is missing or not JSON)."""
    return check_format(fmt, read_json(path, what), path)


def check_format(fmt: type[Format], obj: Any, where: FilePath) -> Format:
    """``obj`` (parsed JSON) as ``fmt``, or one :class:`DupqError` sentence naming ``where`` and the field."""
    try:
        return fmt.model_validate(obj)
    except ValidationError as e:
        raise DupqError(_sentence(e.errors()[0], obj, where)) from None


_WORDS = {  # pydantic's own error types, as this module's sentences say them
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "dataclass_type": "a JSON object",
    "dict_type": "a JSON object",
    "list_type": "a list",
    "string_type": "a string",
    "bool_type": "true or false",
}


def _sentence(error: dict[str, Any], obj: Any, where: FilePath) -> str:
    """One sentence for pydantic's first error: the file, the field (``encoder.dim``), what it must be."""
    if error["type"] == "sentence":
        return f"{where}: {error['msg']}"
    field = _field(error["loc"], obj)
    if error["type"] == "corrupt":
        return f"{where} is corrupt: {error['msg'].rstrip('.')}."
    if error["type"] == "missing":
        return f"{where} is corrupt: {field} is missing."
    if error["type"] == "literal_error":
        words = error["ctx"]["expected"]
    else:
        words = _WORDS.get(error["type"], error["msg"][:1].lower() + error["msg"][1:])
    return f"{where} is corrupt: {field} must be {words}, not {_shown(error['input'])}."


def _field(loc: tuple, obj: Any) -> str:
    """``encoder.dim`` or ``training.history[2].epoch`` for pydantic's ``loc``, walking the JSON itself:
    a part of ``loc`` that is not a key or index there (a union's tag) is pydantic's, and is skipped."""
    name = ""
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(obj, dict) and isinstance(part, str) and (part in obj or last):
            name, obj = f"{name}.{part}" if name else part, obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and 0 <= part < len(obj):
            name, obj = f"{name}[{part}]", obj[part]
    return name or "the file"


def _shown(value: Any, most: int = 80) -> str:
    """``repr(value)``, cut to ``most`` characters (a vocabulary's whole token list is no message)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def inside(path: Path, root: Path) -> bool:
    """True when ``path``, every link resolved, is ``root`` (resolved) or lies under it."""
    target, root = path.resolve(), root.resolve()
    return target == root or root in target.parents
