"""The error-code rule (dupq.data.codes): what it finds, what it leaves, and the yardstick it is measured on."""

from __future__ import annotations

import pytest

from dupq.data.codes import codes, shared_codes, tokens
from dupq.evaluation.tasks import YARDSTICKS, read_help_desk_pairs


@pytest.mark.parametrize(
    "text, found",
    [
        ("Windows Update stops with 0x80070005 every time", {"0x80070005"}),
        ("Outlook send/receive error 0x800CCC0E", {"0x800ccc0e"}),
        ("Query fails with ORA-00942 though I can see the table", {"ora-00942"}),
        ("PlayStation says CE-34878-0 and the game closes", {"ce-34878-0"}),
        ("Printer says E-401 and stops printing", {"e-401"}),
        ("Bosch dishwasher blinking error E15", {"e15"}),
        ("My site shows error 503 since this morning", {"503"}),
        ("Disney+ error code 83 on my phone", {"83"}),
        ("SQLSTATE 23505 duplicate key", {"23505"}),
        ("Canon displays support code 5100", {"5100"}),
        ("How many steps a day should I walk? Is 10,000 steps necessary?", set()),
        ("Download is 300 Mbps but upload is only 20", set()),
        ("Is an i7 better than an i5 for gaming?", set()),
        ("What is 0x10 in decimal?", set()),  # a hex number of fewer than four digits
    ],
)
def test_codes_are_found_by_the_rule(text, found):
    assert codes(text) == found


def test_a_code_is_shared_as_a_whole_token_only():
    assert shared_codes({"503"}, "Why does my website return HTTP 503?") == {"503"}
    assert shared_codes({"503"}, "Error 5030 on the router") == set()
    assert shared_codes({"ora-00942"}, "ORA-00942: table or view does not exist") == {"ora-00942"}
    assert shared_codes(set(), "anything") == set()
    assert {"ora-00942", "table"} <= tokens("ORA-00942: table")


def test_every_error_code_question_names_its_old_questions_code():
    """Each new question of the error-code yardstick names a code, and its old question holds that code, and no
    other old question of the file holds it (so the right answer is the one with the same code)."""
    pairs = read_help_desk_pairs(YARDSTICKS / "error_codes.tsv")
    assert {"dev", "test"} == set(pairs.splits) and len(pairs.new) >= 40
    for new, old in zip(pairs.new, pairs.old):
        found = codes(new)
        assert found and shared_codes(found, old), new
        others = [o for o in pairs.old if o != old and shared_codes(found, o)]
        assert not others, (new, others)
