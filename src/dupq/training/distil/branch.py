"""Making a static branch (:mod:`dupq.modeling.static`) for a model: the teacher's view of each word, or model2vec's.

Two sources of a per-word table, both from all-MiniLM-L6-v2 and needing no corpus:

* ``teacher`` (route F of docs/experiments/9-meaning-beyond-quora.md): the teacher encodes each
  vocabulary word alone; the vectors are projected on their top ``dim`` right singular vectors
  (uncentred: a sum needs the direction every word shares) and each row weighted ``a / (a + p)``
  (SIF, Arora, Liang & Ma 2017), ``p`` the word's Zipf probability from its rank. Unknown words:
  the teacher's vector of each WordPiece token alone, on the same directions.
* ``model2vec``: a folder of model2vec's ``distill`` (Tulkens & van Dongen 2024); a word's row is
  the mean of its pieces' rows.

``dupq adapt`` teaches a branch a help desk's own words afterwards (:func:`taught_words`).

>>> vocab = model.encoder.lstm().vocab                                                      # doctest: +SKIP
>>> words, pieces = teacher_vectors(vocab, encode, packaged_teacher() / "tokenizer.json")   # doctest: +SKIP
>>> branch = teacher_branch(vocab, words, pieces, tokenizer_json, dim=128, a=0.002, weight=1.0)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.model import Model
from dupq.modeling.static import StaticBranch, StaticConfig, check_weight

FIRST_WORD = 2  # ids 0 and 1 are padding and the unknown word
FIT_WORDS = 4_000  # known words the teacher's map to a branch's rows is fitted on (taught_words)
FIT_COSINE = 0.9  # below this, a branch's rows are not the teacher's word vectors through a linear map
NO_WORDS = "a static branch reads a word vocabulary; this model has none."
SPECIAL = re.compile(r"^\[[A-Za-z0-9_]+\]$")  # [PAD], [UNK], [CLS], [unused12], ...: no text to teach


def check_words(model: Model) -> Vocabulary:
    """The model's word vocabulary; a sentence-transformers model is refused."""
    vocab = model.encoder.lstm(NO_WORDS).vocab
    if model.judge.head_config is None or model.threshold_on != "probability":
        raise DupqError(
            "a static branch changes the cosine; it needs a model whose pair head judges pairs on the probability."
        )
    return vocab


def piece_texts(tokenizer_json: str) -> tuple[np.ndarray, list[str]]:
    """``(ids, texts)`` of a WordPiece tokenizer's pieces that stand for text (``##ing`` read as ``ing``)."""
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_str(tokenizer_json).get_vocab()
    kept = sorted((i, t.removeprefix("##")) for t, i in vocab.items() if not SPECIAL.match(t) and t != "##")
    return np.array([i for i, _ in kept], dtype=np.int64), [t for _, t in kept]


def _encode_all(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
    return np.concatenate([encode(texts[i : i + 4096]) for i in range(0, len(texts), 4096)])


def teacher_vectors(
    vocab: Vocabulary, encode: Callable[[list[str]], np.ndarray], tokenizer_json: str | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The teacher's vector of each word ``(V - 2, T)`` and of each WordPiece piece ``(P, T)`` (zeros for
    specials; None without a tokenizer), each read alone."""
    words = _encode_all(encode, vocab.tokens[FIRST_WORD:])
    if tokenizer_json is None:
        return words, None
    ids, texts = piece_texts(tokenizer_json)
    pieces = np.zeros((int(ids.max()) + 1, words.shape[1]), np.float32)
    pieces[ids] = _encode_all(encode, texts)
    return words, pieces


def zipf_weights(count: int, a: float) -> np.ndarray:
    """``(count,)`` SIF weights ``a / (a + p)``, ``p`` the Zipf probability of each rank 1..count."""
    ranks = np.arange(1, count + 1, dtype=np.float64)
    p = 1.0 / (ranks * np.sum(1.0 / ranks))
    return (a / (a + p)).astype(np.float32)


def teacher_branch(
    vocab: Vocabulary,
    words: np.ndarray,
    pieces: np.ndarray | None,
    tokenizer_json: str | None,
    dim: int,
    a: float,
    weight: float,
    source: str = "all-MiniLM-L6-v2: each word alone, SIF-weighted",
) -> StaticBranch:
    """The branch of the teacher's word vectors (:func:`teacher_vectors`) on their top ``dim`` directions."""
    _, _, vt = np.linalg.svd(words, full_matrices=False)
    basis = vt[:dim].T  # (T, dim)
    table = np.zeros((len(vocab), dim), np.float32)  # buckets keep zeros: they stand for no word
    table[FIRST_WORD : len(vocab.tokens)] = (words @ basis) * zipf_weights(len(words), a)[:, None]
    projected = None if pieces is None else (pieces @ basis).astype(np.float32)
    config = StaticConfig(dim=dim, weight=weight, source=f"{source} (a {a:g})", pieces=pieces is not None)
    return StaticBranch(config, table, projected, tokenizer_json or "")


def taught_words(
    branch: StaticBranch,
    vocab: Vocabulary,
    words: list[str],
    encode: Callable[[list[str]], np.ndarray],
    sample: int = FIT_WORDS,
) -> tuple[StaticBranch | None, dict[str, Any]]:
    """``branch`` taught ``words`` (ones ``vocab`` lacks): each row the teacher's vector of the word alone, through
    the linear map from the teacher's word vectors to the branch's rows.

    The map is fitted by least squares on up to ``sample`` words of the vocabulary's rarer half, whose
    SIF weights are all but 1, as a word rarer than every one of the vocabulary's is: for a branch of
    the same teacher's words (:func:`teacher_branch`) it is the branch's projection, recovered to the
    rounding of float16. Returns ``(None, why)`` where the rows are not such a map of this teacher's
    vectors (their mean cosine to the map's below :data:`FIT_COSINE`: another teacher's or
    model2vec's table), else ``(branch, {"words", "fitted_on", "map_cosine"})``.
    """
    rare = np.arange(FIRST_WORD + (len(vocab.tokens) - FIRST_WORD) // 2, len(vocab.tokens))
    picked = np.unique(np.linspace(0, len(rare) - 1, min(sample, len(rare))).astype(np.int64)) if len(rare) else rare
    picked = rare[picked]
    teacher = _encode_all(encode, [vocab.tokens[i] for i in picked]) if len(picked) else np.zeros((0, 1))
    if len(picked) < 2 * teacher.shape[1]:
        return None, {"why": f"the vocabulary has {len(picked)} rare words, too few to fit the teacher's map"}
    rows = branch.words[picked]
    mapping = np.linalg.lstsq(teacher.astype(np.float64), rows.astype(np.float64), rcond=None)[0]  # (T, dim)
    fitted = teacher @ mapping
    norms = np.linalg.norm(fitted, axis=1) * np.linalg.norm(rows, axis=1)
    cosine = float(np.mean(np.sum(fitted * rows, axis=1)[norms > 0] / norms[norms > 0]))
    if cosine < FIT_COSINE:
        return None, {"why": f"its rows are not a linear map of this teacher's word vectors (cosine {cosine:.3f})"}
    taught = branch.with_added(words, (_encode_all(encode, words) @ mapping).astype(np.float32))
    return taught, {"words": len(words), "fitted_on": len(picked), "map_cosine": round(cosine, 4)}


def model2vec_branch(vocab: Vocabulary, folder: Path, weight: float, pieces: bool = True) -> StaticBranch:
    """The branch of a model2vec model folder (``model.safetensors`` with ``embeddings``, ``tokenizer.json``):
    each word's row the mean of its pieces' rows."""
    from tokenizers import Tokenizer

    try:
        embeddings = load_file(folder / "model.safetensors")["embeddings"].astype(np.float32)  # (P, dim)
        tokenizer_json = (folder / "tokenizer.json").read_text(encoding="utf-8")
    except (OSError, KeyError, ValueError) as e:
        raise DupqError(f"{folder} is not a model2vec model folder ({e}).") from None
    tokenizer = Tokenizer.from_str(tokenizer_json)
    table = np.zeros((len(vocab), embeddings.shape[1]), np.float32)
    words = vocab.tokens[FIRST_WORD:]
    for row, encoding in enumerate(tokenizer.encode_batch(words, add_special_tokens=False), start=FIRST_WORD):
        if encoding.ids:
            table[row] = embeddings[encoding.ids].mean(0)
    config = StaticConfig(dim=embeddings.shape[1], weight=weight, source=f"model2vec {folder.name}", pieces=pieces)
    return StaticBranch(config, table, embeddings if pieces else None, tokenizer_json if pieces else "")


def with_branch(model: Model, branch: StaticBranch | None, info: dict | None = None) -> Model:
    """``model`` with ``branch`` joined to its vectors (None: without one); the rest is the model's."""
    metrics = dict(model.metrics)
    if info is not None:
        metrics["static_branch"] = info
    return Model(model.encoder.lstm().with_branch(branch), copy.copy(model.judge), metrics)


def branch_model(
    model: Model,
    source: str,
    dim: int = 128,
    a: float = 2e-3,
    weight: float = 1.0,
    pieces: bool = True,
    teacher: str | None = None,
    log: Callable[[str], None] = print,
) -> Model:
    """``model`` with a new static branch of ``source`` (``"teacher"``, or a model2vec folder) joined at ``weight``."""
    import time

    weight = check_weight(weight, "the static branch's weight")
    from dupq.modeling.pretrained import packaged_teacher
    from dupq.training.distil.teacher import load_teacher

    vocab = check_words(model)
    started = time.perf_counter()
    if source == "teacher":
        encode, name = load_teacher(teacher)
        tokenizer = (packaged_teacher() if teacher is None else Path(teacher)) / "tokenizer.json"
        if pieces and not tokenizer.is_file():
            raise DupqError(f"the teacher's pieces need its {tokenizer}; pass --no-pieces for a teacher without one.")
        tokenizer_json = tokenizer.read_text(encoding="utf-8") if pieces else None
        words, piece_vectors = teacher_vectors(vocab, encode, tokenizer_json)
        branch = teacher_branch(vocab, words, piece_vectors, tokenizer_json, dim, a, weight, f"{name}: each word alone")
    else:
        branch = model2vec_branch(vocab, Path(source), weight, pieces)
    seconds = time.perf_counter() - started
    log(f"static branch from {branch.config.source}: {len(vocab.tokens) - FIRST_WORD:,} words in {seconds:.0f}s")
    info = {"config": {**branch.config.__dict__}, "a": a if source == "teacher" else None, "seconds": seconds}
    return with_branch(model, branch, info)
