"""Judging pairs given by a user: one pair from the command line, or a stream of millions.

A pairs stream holds one ``question1<TAB>question2`` a line, UTF-8, read as bytes and judged ``chunk`` pairs at a time,
so memory stays flat. A line that cannot be judged (not UTF-8, not two fields, a question with no words) is reported
with its number and skipped; blank lines silently; an overlong line ends the stream after the lines before it
(:mod:`dupq.data.text`). The verdict is :mod:`dupq.modeling.verdict`'s, with the probability where the model has one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dupq.core.errors import DupqError
from dupq.data.questions import check_question
from dupq.modeling.judge import PROBABILITY
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq.modeling.verdict import from_vectors, verdict_json


def judge(model: Model, q1: list[str], q2: list[str], threshold: float | None = None) -> list[dict]:
    """Each pair's ``similarity``, ``probability`` (None when the model gives none) and
    ``duplicate`` (the verdict of :mod:`dupq.modeling.verdict`, at ``threshold``, by default the model's own)."""
    vectors = model.encode([*q1, *q2], batch_size=ENCODE_BATCH)  # (2N, d)
    judged = from_vectors(model, vectors[: len(q1)], vectors[len(q1) :], threshold)
    probability = [None] * len(judged) if judged.probability is None else judged.probability.tolist()
    return [
        {"similarity": s, "probability": p, "duplicate": d, "threshold": judged.threshold}
        for s, p, d in zip(judged.similarity.tolist(), probability, judged.duplicate.tolist())
    ]


def verdict_text(judged: dict, on: str) -> str:
    """``similarity 0.8043 > threshold 0.7128: duplicate (probability 0.9312)``: the compared score first."""
    p, sim = judged["probability"], judged["similarity"]
    first, other = (
        (("probability", p), ("similarity", sim)) if on == PROBABILITY else (("similarity", sim), ("probability", p))
    )
    sign = ">" if judged["duplicate"] else "<="
    tail = "" if other[1] is None else f" ({other[0]} {other[1]:.4f})"
    return f"{first[0]} {first[1]:.4f} {sign} threshold {judged['threshold']:.4f}: {'duplicate' if judged['duplicate'] else 'different'}{tail}"


@dataclass
class Verdict:
    """The judgement of one pair."""

    line: int  # 1-based line number in the input stream
    similarity: float  # cosine similarity of the two question vectors, in [-1, 1]
    duplicate: bool  # score > threshold (the score: the similarity or the probability, as the model says)
    threshold: float  # the threshold used
    probability: float | None = None  # calibrated P(duplicate), where the model has one

    def text(self) -> str:
        prob = "" if self.probability is None else f"\t{self.probability:.4f}"
        return f"{self.line}\t{self.similarity:.4f}{prob}\t{'duplicate' if self.duplicate else 'different'}"

    def json(self) -> str:
        return json.dumps(
            {"line": self.line, **verdict_json(self.similarity, self.duplicate, self.threshold, self.probability)}
        )


def parse_line(raw: bytes, line: int) -> tuple[str, str] | None:
    """The two questions of one input line; None for a blank line; DupqError for a bad one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DupqError(f"line {line} is not UTF-8 text (byte {e.start + 1} cannot be decoded).") from None
    text = text.rstrip("\r\n")
    if not text.strip():
        return None
    fields = text.split("\t")
    if len(fields) != 2:
        raise DupqError(f"line {line} has {len(fields)} tab-separated field(s); expected question1<TAB>question2.")
    return (
        check_question(fields[0], f"question 1 on line {line}"),
        check_question(fields[1], f"question 2 on line {line}"),
    )


def judge_stream(
    model: Model, lines: Iterable[bytes], threshold: float | None = None, chunk: int = 4096
) -> Iterator[list[Verdict | DupqError]]:
    """Judge a stream of ``question1<TAB>question2`` byte lines, ``chunk`` lines at a time.

    Yields one list per chunk holding, in input order, a :class:`Verdict` for each pair and a :class:`DupqError` for
    each line that cannot be judged. Memory is bounded by ``chunk``, not by the length of the stream.

    >>> for items in judge_stream(model, [b"How old are you?\tWhat is your age?\n"]):  # doctest: +SKIP
    ...     print(items[0].text())
    1	0.8731	duplicate
    """
    threshold = model.threshold if threshold is None else float(threshold)
    items: list[Verdict | DupqError] = []
    pending: list[tuple[int, int]] = []  # (position in items, line number) of the pairs to score
    q1: list[str] = []
    q2: list[str] = []

    def flush() -> list[Verdict | DupqError]:
        if pending:
            for (at, number), j in zip(pending, judge(model, q1, q2, threshold)):
                items[at] = Verdict(number, j["similarity"], j["duplicate"], threshold, j["probability"])
        out = items.copy()
        items.clear(), pending.clear(), q1.clear(), q2.clear()
        return out

    try:
        for number, raw in enumerate(lines, 1):
            try:
                pair = parse_line(raw, number)
            except DupqError as e:
                items.append(e)
            else:
                if pair is None:
                    continue
                pending.append((len(items), number))
                items.append(None)  # filled in by flush
                q1.append(pair[0])
                q2.append(pair[1])
            if len(items) >= chunk:
                yield flush()
    except DupqError:  # the stream itself cannot be read on (a line over the cap): judge the lines before it first
        if items:
            yield flush()
        raise
    if items:
        yield flush()
