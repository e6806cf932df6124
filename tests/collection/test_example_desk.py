"""The help desk `make demo` runs (examples/desk): its files agree with each other, and a moderator's round of its
tickets (examples/desk/moderate.py, with the bundled model the demo uses) records decisions on the hits a search
shows that `dupq index calibrate` refits the desk on, without refusing them."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

from dupq import Collection
from dupq.evaluation.collection_calibration import MIN_EACH
from support.kit import cli

DESK = Path(__file__).resolve().parents[2] / "examples" / "desk"


def moderate_module():
    """examples/desk/moderate.py, imported from its file (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location("desk_moderate", DESK / "moderate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def old_questions() -> dict[str, dict[str, str]]:
    with open(DESK / "questions.tsv", newline="") as f:
        return {row["key"]: row for row in csv.DictReader(f, delimiter="\t")}


def test_every_ticket_rewords_an_old_question_of_its_category_or_none_and_both_kinds_are_enough():
    old = old_questions()
    tickets = moderate_module().read_tickets(DESK / "tickets.tsv")
    keys = [t["key"] for t in tickets]
    assert len(set(keys)) == len(keys) and not set(keys) & set(old)
    reworded = [t for t in tickets if t["rewords"]]
    assert all(old[t["rewords"]]["category"] == t["category"] for t in reworded)
    assert {t["category"] for t in tickets} <= {q["category"] for q in old.values()}
    assert min(len(reworded), len(tickets) - len(reworded)) >= MIN_EACH
    # the demo searches its new questions again after the round: none of them may be stored by it
    new = set((DESK / "new.txt").read_text().splitlines())
    assert not new & {t["question"] for t in tickets} and not new & {q["question"] for q in old.values()}


def test_the_moderators_round_decides_the_shown_hits_and_the_desk_is_refitted_on_them(tmp_path, one_torch_thread):
    desk = tmp_path / "desk"

    def run(*args: str) -> str:
        result = cli(*args)
        assert result.exit_code == 0, result.output
        return result.output

    run("index", "build", str(DESK / "questions.tsv"), "--key-column", "key", "--out", str(desk))
    moderate = moderate_module()
    tickets = moderate.read_tickets(DESK / "tickets.tsv")
    with Collection.open(desk) as collection:
        counts = moderate.moderate(collection, tickets)
        assert not collection.queue()
        decisions = collection.decisions()
    reworded = sum(1 for t in tickets if t["rewords"])
    assert counts["tickets"] == len(tickets) and counts["duplicates"] == reworded
    assert counts["different"] == moderate.HITS * len(tickets) - counts["shown"]  # every shown hit is decided
    assert len(decisions) == reworded + counts["different"]
    # a round's decisions are a search's hits: each ticket's are its duplicate (when it has one) and what was shown
    duplicate = {t["key"]: t["rewords"] for t in tickets}
    assert all((y == 1) == (other == duplicate[key]) for key, other, *_, y in decisions)

    report = json.loads(run("index", "calibrate", str(desk), "--json"))
    assert report["decisions"] == len(decisions) and report["contradictions"] == 0
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert after["roc_auc"] >= before["roc_auc"] or after["ece"] <= before["ece"]  # what a refusal would deny
    info = json.loads(run("index", "info", str(desk)))
    assert info["calibration"]["source"] == "collection"
    assert info["calibration"]["fitted_on"]["decisions"] == len(decisions)
