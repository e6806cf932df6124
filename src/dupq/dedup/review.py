"""What a moderator reads of a dedup run: each group's size, representative, members' scores and tiers, and a
review page.

A group's **confidence** is its least member score with the representative (the member a moderator is least sure of
decides whether the group can be merged as it is); each member's **tier** is its score against the run's
:func:`dupq.modeling.verdict.dedup_tiers`. :func:`ranked` orders the groups as the output file lists them, surest
first; :func:`for_review` as the review page does, the largest and least certain first, where a moderator's time
matters most. :func:`write_review` writes the page: one self-contained HTML file (no script, no external asset, every
text escaped) in a new folder, filled beside it and renamed into place.

>>> c = Clusters(np.array([0, 0, 1, 1, 1]), np.array([1, 0, 1, 0, 0], bool), np.array([1, .6, 1, .9, .8], np.float32))
>>> [(g.number, g.size, round(g.confidence, 2)) for g in ranked(c)]
[(1, 3, 0.8), (0, 2, 0.6)]
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write, new_folder
from dupq.dedup.clusters import Clusters
from dupq.modeling.verdict import tiers

REVIEW_PAGE = "index.html"  # the page inside the review folder
REVIEW_LIMIT = 2_000  # groups a page shows (the first, in review order): a browser stays quick; the file has all


@dataclass(frozen=True)
class Group:
    """One group of duplicates: its number in the run (largest first), its members and their scores."""

    number: int
    members: np.ndarray  # (S,) question indices, the representative first, then by falling score
    scores: np.ndarray  # (S,) each member's score with the representative (1.0 for it)

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def representative(self) -> int:
        return int(self.members[0])

    @property
    def confidence(self) -> float:
        """The least score of a member with the representative."""
        return float(self.scores[1:].min())

    def tiers(self, thresholds: dict) -> list[str]:
        """Each member's tier (:func:`~dupq.modeling.verdict.tiers`), ``""`` for the representative."""
        return ["", *(t or "" for t in tiers(self.scores[1:], thresholds["suggest"], thresholds["duplicate"]))]


def groups_of(clusters: Clusters) -> list[Group]:
    """The groups of ``clusters`` in their run's order (largest first)."""
    return [Group(n, m, clusters.score[m].astype(np.float64)) for n, m in enumerate(clusters.groups())]


def ranked(clusters: Clusters) -> list[Group]:
    """The groups surest first: by falling confidence, then falling size, then number."""
    return sorted(groups_of(clusters), key=lambda g: (-g.confidence, -g.size, g.number))


def for_review(groups: list[Group]) -> list[Group]:
    """The groups as a moderator reviews them: the largest first, then the least certain, then number."""
    return sorted(groups, key=lambda g: (-g.size, g.confidence, g.number))


def check_review_folder(folder: Path) -> None:
    """Refuse a review folder that exists already (a page is never written over someone's files) or whose
    parent is missing, in one sentence, before any work."""
    if folder.exists():
        raise DupqError(f"the review folder {folder} already exists; name a new folder.")
    if not folder.parent.is_dir():
        raise DupqError(f"cannot write the review folder {folder}: the folder {folder.parent} does not exist.")


def write_review(
    folder: Path,
    groups: list[Group],
    text: Callable[[int], str],
    key: Callable[[int], str],
    thresholds: dict,
    limit: int = REVIEW_LIMIT,
) -> Path:
    """Write the review page of ``groups`` (the first ``limit`` in :func:`for_review`'s order) into the new
    ``folder`` (filled in a hidden sibling, then renamed into place); returns the page's path."""
    check_review_folder(folder)
    rows = []
    shown = for_review(groups)[:limit]
    for g in shown:
        members = "".join(
            f"<tr><td>{_e(key(i))}</td><td>{'' if j == 0 else f'{s:.3f}'}</td>"
            f"<td>{_badge(t) if j else '<span class=rep>kept</span>'}</td><td>{_e(text(i))}</td></tr>"
            for j, (i, s, t) in enumerate(zip(g.members.tolist(), g.scores.tolist(), g.tiers(thresholds)))
        )
        rows.append(
            f"<section><h2>Group {g.number}: {g.size} questions, confidence {g.confidence:.3f}</h2>"
            f"<p class=rep-text>{_e(text(g.representative))}</p>"
            f"<table><tr><th>key</th><th>score</th><th>tier</th><th>question</th></tr>{members}</table></section>"
        )
    on = _e(thresholds["on"])
    page = (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>dupq dedup: review</title>"
        f"<style>{_STYLE}</style></head><body><h1>Groups of duplicates to review</h1>"
        f"<p>{_count(len(shown), len(groups))}, the largest first, then the least certain. Scores are the {on} with the "
        f"group's first question; tiers: duplicate above {thresholds['duplicate']:.3f} (safe to act on), "
        f"suggest above {thresholds['suggest']:.3f} (worth a look).</p>{''.join(rows)}</body></html>\n"
    )
    with new_folder(folder) as tmp:
        atomic_write(tmp / REVIEW_PAGE, page.encode("utf-8"))
    return folder / REVIEW_PAGE


def _count(shown: int, total: int) -> str:
    return (
        f"{total:,} groups" if shown == total else f"The first {shown:,} of {total:,} groups (the output file has all)"
    )


def _e(s: str) -> str:
    return html.escape(s, quote=True)


def _badge(tier: str) -> str:
    return f"<span class='tier {tier}'>{tier}</span>" if tier else ""


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}section{border-top:1px solid #ccc;"
    "padding:.5em 0}h2{font-size:1.1em}.rep-text{font-weight:bold}table{border-collapse:collapse;width:100%}"
    "td,th{text-align:left;padding:.2em .6em;vertical-align:top}.tier{border-radius:.6em;padding:0 .5em;"
    "color:#fff}.duplicate{background:#1a7f37}.suggest{background:#9a6700}.rep{color:#555}"
)
