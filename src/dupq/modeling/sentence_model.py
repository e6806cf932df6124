"""A pretrained sentence encoder as a dupq model: all-MiniLM-L6-v2, or any sentence-transformers folder.

A distilled LSTM encodes fast but does not reach its teacher's retrieval quality
(docs/distil.md). For users who prefer accuracy to speed, :class:`SentenceModel` makes the teacher
itself a dupq model: one folder that every entry point takes (``dupq evaluate``, ``predict``,
``index``, ``search``, ``serve``, ``Model.load``). It judges pairs as an LSTM model without a pair
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
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import new_folder, readable, write_json
from dupq.modeling.architecture import SENTENCE_TRANSFORMERS, SentenceConfig
from dupq.modeling.folder_format import ModelConfig, check_files, check_new_model_folder, read_config
from dupq.modeling.model import READERS, Model, check_list
from dupq.modeling.pretrained import load_sentence_transformer
from dupq.modeling.static import join_vectors

SUBFOLDER = "sentence-transformers"  # where a model folder keeps the transformer
ENCODE_BATCH = 128  # questions per forward pass, as dupq-lab peers measured MiniLM


class SentenceModel(Model):
    """A sentence-transformers model judged as a dupq model: cosine, dev threshold, beta calibration.

    ``transformer`` is the loaded ``SentenceTransformer``; ``files`` the folder its files are in
    (the fingerprint is theirs); ``judging``: :class:`~dupq.modeling.model.Model`'s ``threshold``,
    ``threshold_info``, ``metrics``, ``calibration`` and ``threshold_on``. Load one with
    :meth:`Model.load <dupq.modeling.model.Model.load>`, make one with :func:`dupq.training.distil.export.export_teacher`.
    """

    def __init__(self, transformer, config: SentenceConfig, files: Path, student: Model | None = None, **judging: Any):
        super().__init__(None, None, **judging)  # no word vocabulary, no LSTM: the transformer brings its own
        if (student is None) != (config.join is None):
            raise DupqError("a joined sentence model needs both its student model and the config's join entry.")
        self.student = student  # a dupq LSTM model whose vectors are joined to the transformer's (config.join)
        self.transformer = transformer
        self._config = config
        self.files = Path(files)
        self._fingerprint: str | None = None

    @property
    def config(self) -> SentenceConfig:
        return self._config

    @property
    def out_dim(self) -> int:
        return self.config.dim + (self.student.out_dim if self.student is not None else 0)

    def encoder_config(self) -> dict[str, Any]:
        return {"type": SENTENCE_TRANSFORMERS, **asdict(self.config)}

    def fingerprint(self) -> str:
        """A short hash of the transformer's files (weights, tokenizer, configs; not the model card,
        ``README.md``): equal fingerprints encode questions alike. Copies of the folder keep it."""
        if self._fingerprint is None:
            digest = hashlib.sha256()
            for path in sorted(p for p in self.files.rglob("*") if p.is_file() and p.name != "README.md"):
                data = path.read_bytes()
                digest.update(f"{path.relative_to(self.files).as_posix()}\0{len(data)}\0".encode())
                digest.update(data)
            if self.student is not None:  # the joined student and its weight encode too
                digest.update(f"{self.student.fingerprint()}\0{self.config.join_weight!r}".encode())
            self._fingerprint = digest.hexdigest()[:16]
        return self._fingerprint

    def encode(self, questions: list[str], batch_size: int = ENCODE_BATCH) -> np.ndarray:
        """Unit vectors ``(N, d)`` float32: ``SentenceTransformer.encode(..., normalize_embeddings=True)``,
        joined with the student's (:func:`~dupq.modeling.static.join_vectors`) when the folder has one."""
        check_list(questions)
        if not len(questions):
            return np.zeros((0, self.out_dim), dtype=np.float32)
        vectors = self.transformer.encode(
            list(questions),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )  # (N, d)
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.student is None:
            return vectors
        return join_vectors(vectors, self.student.encode(list(questions)), self.config.join_weight)  # (N, d + e)

    def save(self, folder: str | os.PathLike, half: bool = False) -> None:
        """Write the model folder.

        Into the folder it was loaded from, only ``config.json`` and ``metrics.json`` are written
        again (a new threshold: ``dupq calibrate``); the transformer there is this model's already.
        Anywhere else the whole folder is written beside ``folder`` and renamed into place, the
        transformer's files copied byte for byte (so the copy keeps the fingerprint). A folder
        that is not a dupq model folder is never replaced. ``half`` (float16 weights) is the
        LSTM's: a CPU runs this model in float32 whatever it stores.
        """
        folder = Path(folder)
        if self.folder is not None and folder.resolve() == self.folder:
            self._write_json(folder)
            return
        if half:
            raise DupqError(
                "--half stores an LSTM's weights as float16; a sentence-transformers model is copied as it is."
            )
        check_new_model_folder(folder, overwrite=True)
        with new_folder(folder) as tmp:
            shutil.copytree(self.files, tmp / self.config.folder)
            if self.student is not None:
                half = self.student.folder is not None and read_config(self.student.folder).weights_dtype == "float16"
                self.student.save(tmp / self.config.join, half=half)
            readable(tmp)
            self._write_json(tmp)

    def _write_json(self, folder: Path) -> None:
        write_json(folder / "metrics.json", self.metrics)
        self._write_config(folder, "float32")

    @classmethod
    def read(cls, folder: Path, config: ModelConfig, **judging: Any) -> SentenceModel:
        """The model in ``folder``, whose ``config.json`` (``config``) names a sentence-transformers
        encoder; ``judging`` as for the constructor. Use ``Model.load``."""
        sentence = config.encoder
        files = check_files(folder / sentence.folder, folder)
        student = None
        if sentence.join is not None:
            student = Model.load(folder / sentence.join)
            if student.vocab is None:
                raise DupqError(f"{folder / sentence.join} must hold a dupq LSTM model to join.")
        transformer, _ = load_sentence_transformer(str(files), needed_by=f"the model folder {folder}")
        if width(transformer) != sentence.dim:
            raise DupqError(
                f"{folder / 'config.json'} is corrupt: encoder.dim is {sentence.dim}, "
                f"but the model in {files} encodes {width(transformer)} dimensions."
            )
        return cls(transformer, sentence, files, student, **judging)


def width(transformer) -> int:
    """The width of a sentence-transformers model's vectors (asked under the method's old name before 6.2)."""
    get = getattr(transformer, "get_embedding_dimension", None) or transformer.get_sentence_embedding_dimension
    return int(get() or len(transformer.encode(["width"])[0]))


READERS[SENTENCE_TRANSFORMERS] = SentenceModel.read
