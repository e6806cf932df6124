"""A moderator's round on the example desk, through the library as a moderator's tool would go through it.

The tickets of ``tickets.tsv`` come in and wait in the review queue (``pending``: no search finds them yet). The
moderator takes them in the queue's order, searches each as ``dupq search -k 3`` does, and decides what the search
shows: the old question the ticket asks again (its ``rewords`` column, written with the ticket; empty for a question
the desk has no answer to) is its duplicate, every other hit shown is a different question. An old question that
the search did not show is still the ticket's duplicate: the moderator knows the desk. ``make demo`` runs it after
``dupq index build``, and ``dupq index calibrate`` refits the desk's verdict on what it recorded:

    python examples/desk/moderate.py runs/desk examples/desk/tickets.tsv
"""

from __future__ import annotations

import csv
import sys

from dupq import Collection

HITS = 3  # the hits shown per ticket, each decided: as many as the demo's `dupq search -k 3` shows
SHOWN = 3  # the tickets whose decisions are printed
MODERATOR = "demo moderator"  # who decided, as the review page's past decisions show it


def read_tickets(path: str) -> list[dict[str, str]]:
    """The tickets as ``{"key", "category", "question", "rewords"}`` rows."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def moderate(collection: Collection, tickets: list[dict[str, str]], hits: int = HITS, show: int = 0) -> dict[str, int]:
    """Queue ``tickets`` in ``collection`` and decide each one's shown hits (the first ``show`` tickets' decisions
    printed); what was decided, counted."""
    collection.add(
        [t["question"] for t in tickets],
        [{"category": t["category"]} for t in tickets],
        [t["key"] for t in tickets],
        pending=True,
    )
    rewords = {t["key"]: t["rewords"] or None for t in tickets}
    counts = {"tickets": 0, "duplicates": 0, "shown": 0, "different": 0}
    for _, key, text, _ in collection.queue():
        canonical = rewords[key]
        found = collection.search([text], k=hits)[0]
        shown = [h.key for h in found]
        different = [h.key for h in found if canonical is None or canonical not in (h.key, h.duplicate_of)]
        if different:
            collection.decide(key, not_duplicate_of=different, by=MODERATOR)
        if canonical is not None:
            collection.decide(key, duplicate_of=canonical, by=MODERATOR)
        if counts["tickets"] < show:
            print(f"{key} {text!r}: duplicate of {canonical or 'none'}; different: {', '.join(different) or 'none'}")
        counts["tickets"] += 1
        counts["duplicates"] += canonical is not None
        counts["shown"] += canonical in shown
        counts["different"] += len(different)
    return counts


def main(desk: str, tickets: str) -> None:
    with Collection.open(desk) as collection:
        n = moderate(collection, read_tickets(tickets), show=SHOWN)
    print(
        f"decided {n['tickets']} tickets in {desk}: {n['duplicates']} duplicates of an old question "
        f"({n['shown']} of them among the top {HITS} hits), {n['different']} hits judged different"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
