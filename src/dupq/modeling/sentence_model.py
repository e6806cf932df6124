"""A pretrained sentence encoder as a dupq encoder: all-MiniLM-L6-v2, or any sentence-transformers folder.

A distilled LSTM encodes fast but does not reach its teacher's retrieval quality
(docs/distil.md). For users who prefer accuracy to speed, :class:`TransformerEncoder` makes the teacher
itself a dupq model's encoder: one folder that every entry point takes (``dupq evaluate``, ``predict``,
``index``, ``search``, ``serve``, ``Model.load``). Its model judges pairs as an LSTM model without a pair
head does: by the cosine of the two unit vectors, against a threshold chosen on the dev pairs,
with a beta calibration fitted there (:func:`dupq.evaluation.evaluate.calibrate`, as ``dupq train`` uses it).

The folder, written by :func:`dupq.training.distil.export.export_teacher` (``dupq distil export``)::

    config.json              "encoder": {"type": "sentence-transformers", "folder", "name", "dim",
                             "max_seq_length"}, and the calibration and threshold of any model
    metrics.json             where it came from, the split, the dev calibration, the test figures
    sentence-transformers/   the model as sentence-transformers' own ``save`` writes it

No pickle: the subfolder must hold JSON and safetensors only (a ``.bin``, ``.pt``, ``.pkl``, ...
file is refused before anything is loaded, and so is a link that leads outside the model folder:
:func:`dupq.modeling.folder_format.check_files`), and sentence-transformers runs no code of the folder
(``trust_remote_code`` stays off). Nothing is downloaded (:func:`dupq.modeling.pretrained.load_sentence_transformer`).
sentence-transformers is imported only when such a folder is loaded or made: the optional
``distil`` extra, not the base install.

>>> model, record = export_teacher(None, "runs/minilm", splits.dev, splits.test, info={})   # doctest: +SKIP
>>> Model.load("runs/minilm").probability("When will I see you?", "When can I see you again?")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.modeling.architecture import SENTENCE_TRANSFORMERS, SentenceConfig
from dupq.modeling.encoding import READERS, TextEncoder
from dupq.modeling.folder_format import ModelConfig, check_files
from dupq.modeling.model import Model
from dupq.modeling.pretrained import load_sentence_transformer, not_installed
from dupq.modeling.static import join_vectors

SUBFOLDER = "sentence-transformers"  # where a model folder keeps the transformer
ENCODE_BATCH = 128  # questions per forward pass, as dupq-lab peers measured MiniLM


class TransformerEncoder(TextEncoder):
    """A ``SentenceTransformer`` (``transformer``) whose files are in ``files``: the fingerprint is theirs.

    ``config`` is ``config.json``'s encoder entry; a folder joined to a dupq model (``config.join``) is
    read as a :class:`JoinedEncoder` holding this one. ``transformer`` None: the network is loaded at its
    first use (the errors name the model folder ``home``), so a model that never encodes (a reranker
    recorded at build, a search answered from stored vectors) costs no import of sentence-transformers.
    """

    copied = True

    def __init__(self, transformer, config: SentenceConfig, files: Path, home: Path | None = None):
        self._transformer = transformer
        self._loading = threading.Lock()  # the service's threads may ask for it at once: load it once
        self.config = config
        self.files = Path(files)
        self.home = home
        self._hashed: hashlib._Hash | None = None

    @property
    def transformer(self):
        """The loaded network; loaded here the first time, refused in one sentence if ``encoder.dim`` is wrong."""
        with self._loading:
            if self._transformer is None:
                transformer, _ = load_sentence_transformer(
                    str(self.files), needed_by=f"the model folder {self.home}", int8=self.config.int8
                )
                if width(transformer) != self.config.dim:
                    raise DupqError(
                        f"{Path(self.home or self.files) / 'config.json'} is corrupt: encoder.dim is {self.config.dim}, "
                        f"but the model in {self.files} encodes {width(transformer)} dimensions."
                    )
                self._transformer = transformer
        return self._transformer

    @property
    def out_dim(self) -> int:
        return self.config.dim

    def config_json(self) -> dict[str, Any]:
        config = asdict(self.config)
        if not config["int8"]:
            del config["int8"]  # a float32 model's config.json as it was before int8 existed
        return {"type": SENTENCE_TRANSFORMERS, **config}

    def hashed(self) -> hashlib._Hash:
        """The transformer's files (weights, tokenizer, configs; not the model card, ``README.md``), each
        with its path and size: copies of the folder keep it. Run in int8, its vectors differ: so does its hash."""
        if self._hashed is None:
            digest = hashlib.sha256()
            for path in sorted(p for p in self.files.rglob("*") if p.is_file() and p.name != "README.md"):
                data = path.read_bytes()
                digest.update(f"{path.relative_to(self.files).as_posix()}\0{len(data)}\0".encode())
                digest.update(data)
            if self.config.int8:
                digest.update(b"\0int8")
            self._hashed = digest
        return self._hashed.copy()

    def encode(self, questions: list[str], batch_size: int | None = None) -> np.ndarray:
        """Unit vectors ``(N, d)`` float32: ``SentenceTransformer.encode(..., normalize_embeddings=True)``, which
        sorts the questions by length first, so that a batch pads its questions to nearly their own length."""
        if not len(questions):
            return np.zeros((0, self.out_dim), dtype=np.float32)
        vectors = self.transformer.encode(
            list(questions),
            batch_size=batch_size or ENCODE_BATCH,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )  # (N, d)
        return np.asarray(vectors, dtype=np.float32)

    def save(self, folder: Path, half: bool, head: dict[str, np.ndarray]) -> str:
        """The transformer's files copied byte for byte (so the copy keeps the fingerprint)."""
        shutil.copytree(self.files, folder / self.config.folder)
        return "float32"

    def moved_to(self, folder: Path) -> None:
        """Read the files from the model folder ``folder`` from now on (a folder written beside it, renamed)."""
        self.files = folder / self.config.folder


class JoinedEncoder(TextEncoder):
    """A transformer's vectors joined with a dupq model's (``student``) at ``config.join_weight``:
    ``[t, sqrt(w) s] / sqrt(1 + w)`` (:func:`~dupq.modeling.static.join_vectors`), as ``dupq distil export
    --join`` writes it. The student is a whole model folder, ``config.join``, inside the model's."""

    copied = True

    def __init__(self, transformer: TransformerEncoder, student: Model):
        if transformer.config.join is None:
            raise DupqError("a joined sentence model needs both its student model and the config's join entry.")
        self.transformer = transformer
        self.student = student

    @property
    def weight(self) -> float:
        return self.transformer.config.join_weight

    @property
    def out_dim(self) -> int:
        return self.transformer.out_dim + self.student.out_dim

    def config_json(self) -> dict[str, Any]:
        return self.transformer.config_json()

    def without_branch(self) -> TextEncoder:
        """Refused: the student is no static branch, and the judge's threshold was chosen on the joined vectors."""
        raise DupqError(
            "a sentence model joined to a dupq model has no static branch to leave out (--no-branch): its threshold "
            "and calibration were chosen on the joined vectors; make the teacher alone with `dupq distil "
            "teacher-model` without --join."
        )

    def hashed(self) -> hashlib._Hash:
        """The transformer's files, then the student's fingerprint and the weight."""
        digest = self.transformer.hashed()
        digest.update(f"{self.student.fingerprint()}\0{self.weight!r}".encode())
        return digest

    def encode(self, questions: list[str], batch_size: int | None = None) -> np.ndarray:
        """The transformer's unit vectors ``(N, d)`` joined with the student's ``(N, e)``: ``(N, d + e)``."""
        if not len(questions):
            return np.zeros((0, self.out_dim), dtype=np.float32)
        t = self.transformer.encode(questions, batch_size)
        return join_vectors(t, self.student.encode(list(questions)), self.weight)

    def save(self, folder: Path, half: bool, head: dict[str, np.ndarray]) -> str:
        """The transformer's files, and the student's folder at the precision it is stored in."""
        self.transformer.save(folder, half, head)
        self.student.save(folder / self.transformer.config.join, half=None)
        return "float32"

    def moved_to(self, folder: Path) -> None:
        self.transformer.moved_to(folder)
        self.student.folder = folder / self.transformer.config.join


def read_transformer(folder: Path, config: ModelConfig) -> tuple[TransformerEncoder | JoinedEncoder, None]:
    """The encoder of ``folder``, whose ``config.json`` (``config``) names a sentence-transformers encoder
    (with no pair head: the cosine and the calibration judge its pairs). Use ``Model.load``."""
    sentence = config.encoder
    files = check_files(folder / sentence.folder, folder)
    student = None
    if sentence.join is not None:
        student = Model.load(folder / sentence.join)
        student.encoder.lstm(f"{folder / sentence.join} must hold a dupq LSTM model to join.")
    if importlib.util.find_spec("sentence_transformers") is None:  # refused now; the network loads at first encode
        raise not_installed(f"the model folder {folder}")
    encoder = TransformerEncoder(None, sentence, files, folder)
    return (encoder if student is None else JoinedEncoder(encoder, student)), None


def width(transformer) -> int:
    """The width of a sentence-transformers model's vectors (asked under the method's old name before 6.2)."""
    get = getattr(transformer, "get_embedding_dimension", None) or transformer.get_sentence_embedding_dimension
    return int(get() or len(transformer.encode(["width"])[0]))


READERS[SENTENCE_TRANSFORMERS] = read_transformer
