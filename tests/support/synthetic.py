"""Synthetic question pairs in the Quora file's format, for tests that need no real data.

Not a test module. :func:`write_pairs` writes ``id, qid1, qid2, question1, question2,
is_duplicate`` (tab-separated, CSV-style quoting, ``.gz`` if the name says so), deterministic
from a seed. Every question is made here from templates and word lists; none is taken from the
Quora file.

How the pairs are made, so that a tiny LSTM learns something in one epoch:

* a **concept** is an underlying question: an intent (learn, cost, career, ...), a subject
  (chess, Python, baking, ...) and an optional qualifier (``in Canada``, ``as a beginner``);
* a question is a **wording** of a concept: one of the intent's templates, with its
  alternatives (``How do I`` / ``How can I``) filled in at random;
* a **duplicate** (about 37 %) is two different wordings of one concept;
* a **non-duplicate** is a near miss (the same intent and qualifier with another subject, the
  same intent and subject with another qualifier, the same subject and qualifier with another
  intent) or an unrelated concept. So two questions are duplicates exactly when their concepts
  are equal: the labels never contradict each other;
* questions **repeat** as Quora's do: a row's first question is often one seen before, with
  the same qid (qids are numbered in order of first appearance);
* the **quirks** the reader handles: ``question2`` empty in two rows (:data:`EMPTY_ROWS`, label
  0, dropped by ``read_pairs``), ``question1`` the literal text ``n/a`` in one (:data:`NA_ROW`),
  and double quotes inside some questions (written CSV-quoted).

Distinct questions have distinct words once punctuation is stripped (case kept), so a model
never encodes two of them alike for want of a word; ``tests/data/test_synthetic.py`` checks this.
"""

from __future__ import annotations

import csv
import gzip
import random
import re
from dataclasses import dataclass
from pathlib import Path

from dupq.data.pairs import SplitConfig

HEADER = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
DUPLICATE_SHARE = 0.37
SMALL_SPLIT = SplitConfig(train_pool=20_000, test=2_000, dev=2_000, labelled_val=2_000)
SYNTHETIC_ROWS = 32_000  # SMALL_SPLIT's 24,000, and the 32,000 of the kill -9 training test
REPEAT_SHARE = 0.3  # rows whose first question is one already used
EMPTY_ROWS = (1_234, 17_321)  # question2 empty: read_pairs drops these rows
NA_ROW = 5_432  # question1 is the literal text "n/a", kept as text

# fmt: off
SUBJECTS = [
    "chess", "Python", "Java", "photography", "cooking", "swimming", "painting", "French", "Spanish", "Japanese",
    "German", "economics", "physics", "chemistry", "astronomy", "yoga", "running", "poetry", "accounting",
    "marketing", "investing", "gardening", "knitting", "baking", "cycling", "boxing", "surfing", "sailing",
    "drawing", "singing", "dancing", "calculus", "statistics", "philosophy", "architecture", "welding", "plumbing",
    "carpentry", "nursing", "law", "medicine", "journalism", "animation", "robotics", "electronics", "juggling",
    "archery", "fencing", "skiing", "tennis", "golf", "football", "cricket", "basketball", "piano", "violin",
    "drums", "guitar", "pottery", "sculpture", "chemistry labs", "web design", "data science", "machine learning",
    "graphic design", "public speaking", "creative writing", "rock climbing", "ice skating", "scuba diving",
    "video editing", "interior design", "car repair", "beekeeping", "birdwatching", "calligraphy", "origami",
    "meditation", "weight training", "martial arts",
]
QUALIFIERS = [""] * 6 + [
    " in India", " in Canada", " in Germany", " in Brazil", " in Japan", " in Kenya", " in Mexico", " in Spain",
    " in Egypt", " in Norway", " in Chile", " in Vietnam", " as a beginner", " as an adult", " as a student",
    " as a teenager", " after 40", " on a budget", " without a teacher", " from home",
]
# intent -> templates; "[a|b]" picks one alternative, {s} is the subject, {q} the qualifier.
INTENTS = {
    "learn": ["[How do I|How can I|How should I] learn {s}{q}?",
              "What is the [best|easiest|fastest] way to learn {s}{q}?", "How [can|do] I get started with {s}{q}?",
              "Where should I begin if I want to learn {s}{q}?", "What steps should I take to learn {s}{q}?"],
    "career": ["How do I get a job in {s}{q}?", "How [can|do] I build a career in {s}{q}?",
               "What does it take to work in {s}{q}?", "How do people find [work|jobs] in {s}{q}?"],
    "cost": ["How much does it cost to take up {s}{q}?", "Is {s} an expensive hobby{q}?",
             "What is the [cost|price] of getting into {s}{q}?", "How much money do I need for {s}{q}?"],
    "time": ["How long does it take to get good at {s}{q}?", "How many [years|months] does it take to master {s}{q}?",
             "How much time is needed to become good at {s}{q}?"],
    "popular": ["Why is {s} so popular{q}?", "What makes {s} so popular{q}?",
                "Why do so many people [like|love|enjoy] {s}{q}?"],
    "hard": ["Is {s} hard to learn{q}?", "How [difficult|hard] is {s}{q}?", "Is it difficult to pick up {s}{q}?"],
    "books": ["What are the best books on {s}{q}?", "Which books should I read about {s}{q}?",
              "What books would you recommend for {s}{q}?"],
    "online": ["What are good websites for learning {s}{q}?", "Which online courses teach {s} well{q}?",
               "Where can I learn {s} online{q}?"],
    "benefits": ["What are the benefits of {s}{q}?", "Why should I take up {s}{q}?", "How does {s} help people{q}?"],
    "mistakes": ["What are common mistakes beginners make in {s}{q}?",
                 "Which mistakes should I avoid when starting {s}{q}?", "What do new people get wrong about {s}{q}?"],
    "practice": ["How often should I practice {s}{q}?", "How many hours a day should I spend on {s}{q}?",
                 "What is a good practice routine for {s}{q}?"],
    "future": ["What is the future of {s}{q}?", "Will {s} still matter in ten years{q}?",
               "How will {s} change in the coming years{q}?"],
    "teacher": ["How do I find a good {s} teacher{q}?", "Where can I find a tutor for {s}{q}?",
                "How should I choose a {s} coach{q}?"],
    "meaning": ["What is {s}{q}?", 'What does "{s}" mean{q}?', "How would you define {s}{q}?",
                "Can someone explain what {s} is{q}?"],
}
# fmt: on
_CHOICE = re.compile(r"\[([^\]]+)\]")


@dataclass(frozen=True)
class Concept:
    """The question behind a wording: two questions are duplicates exactly when their concepts are equal."""

    intent: str
    subject: str
    qualifier: str


@dataclass
class Row:
    id: int
    qid1: int
    qid2: int
    question1: str
    question2: str
    is_duplicate: int
    concepts: tuple[Concept | None, Concept | None]  # None for a quirk's text ("n/a", "")


def _expand(text: str) -> list[str]:
    m = _CHOICE.search(text)
    if m is None:
        return [text]
    return [w for alt in m.group(1).split("|") for w in _expand(text[: m.start()] + alt + text[m.end() :])]


def wordings(concept: Concept) -> list[str]:
    """Every wording of ``concept``: each template of its intent with each choice of its alternatives."""
    return [w for t in INTENTS[concept.intent] for w in _expand(t.format(s=concept.subject, q=concept.qualifier))]


class _Maker:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.qids: dict[str, int] = {}
        self.used: list[tuple[str, Concept]] = []  # every question so far, in order, with repeats

    def concept(self) -> Concept:
        r = self.rng
        return Concept(r.choice(list(INTENTS)), r.choice(SUBJECTS), r.choice(QUALIFIERS))

    def wording(self, concept: Concept, avoid: str | None = None) -> str:
        return self.rng.choice([w for w in wordings(concept) if w != avoid])

    def near_miss(self, c: Concept) -> Concept:
        r = self.rng
        kind = r.choices(["subject", "qualifier", "intent", "unrelated"], weights=[25, 20, 25, 30])[0]
        while True:
            if kind == "subject":
                other = Concept(c.intent, r.choice(SUBJECTS), c.qualifier)
            elif kind == "qualifier":
                other = Concept(c.intent, c.subject, r.choice(QUALIFIERS))
            elif kind == "intent":
                other = Concept(r.choice(list(INTENTS)), c.subject, c.qualifier)
            else:
                other = self.concept()
            if other != c:
                return other

    def qid(self, text: str) -> int:
        return self.qids.setdefault(text, len(self.qids) + 1)

    def row(self, i: int) -> Row:
        r = self.rng
        if self.used and r.random() < REPEAT_SHARE:
            q1, c1 = r.choice(self.used)
        else:
            c1 = self.concept()
            q1 = self.wording(c1)
        duplicate = r.random() < DUPLICATE_SHARE
        c2 = c1 if duplicate else self.near_miss(c1)
        q2 = self.wording(c2, avoid=q1)
        self.used += [(q1, c1), (q2, c2)]
        if i == NA_ROW:
            q1, c1, duplicate = "n/a", None, False
        if i in EMPTY_ROWS:
            q2, c2, duplicate = "", None, False
        return Row(i, self.qid(q1), self.qid(q2), q1, q2, int(duplicate), (c1, c2))


def make_rows(n: int, seed: int = 0) -> list[Row]:
    """``n`` rows (ids 0 to n - 1), the same for the same ``n`` and ``seed`` (a longer file starts with the shorter one)."""
    maker = _Maker(seed)
    return [maker.row(i) for i in range(n)]


def write_pairs(path: str | Path, n: int, seed: int = 0) -> Path:
    """Write ``n`` synthetic rows to ``path`` in the Quora format (gzipped if it ends in ``.gz``); returns the path."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(HEADER)
        for row in make_rows(n, seed):
            writer.writerow([row.id, row.qid1, row.qid2, row.question1, row.question2, row.is_duplicate])
    return path
