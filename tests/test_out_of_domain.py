"""The hand-written help-desk yardstick ``bench/data/out_of_domain.tsv`` and its script ``bench/out_of_domain.py``."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dupq.data.pairs import SplitConfig, split_pairs

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "bench" / "data" / "out_of_domain.tsv"
SCRIPT = REPO / "bench" / "out_of_domain.py"


def script():
    """bench/out_of_domain.py as a module (bench/ is not a package), loaded once."""
    if "out_of_domain" not in sys.modules:
        spec = importlib.util.spec_from_file_location("out_of_domain", SCRIPT)
        sys.modules["out_of_domain"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["out_of_domain"]


def normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def rows() -> list[list[str]]:
    with open(PAIRS, newline="", encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t"))


def test_the_file_has_300_pairs_over_15_domains_each_split_in_dev_and_test_alternately():
    header, *body = rows()
    assert header == ["domain", "split", "new", "old"]
    assert len(body) >= 300 and all(len(r) == 4 and all(x.strip() for x in r) for r in body)
    domains = Counter(r[0] for r in body)
    assert len(domains) >= 15
    for domain in domains:
        splits = [r[1] for r in body if r[0] == domain]
        assert splits == ["dev", "test"] * (len(splits) // 2) + ["dev"] * (len(splits) % 2), domain
    for column in (2, 3):  # no question asked twice, and no new question equal to its old one
        texts = [normalised(r[column]) for r in body]
        assert len(set(texts)) == len(texts)
    assert all(normalised(r[2]) != normalised(r[3]) for r in body)
    read = script().read_help_desk_pairs(PAIRS)
    assert (read.new, read.old, read.splits) == ([r[2] for r in body], [r[3] for r in body], [r[1] for r in body])


def test_each_new_question_searches_every_old_question_and_the_distractors_and_finds_its_own_old_one():
    ood = script()
    file = ood.HelpDeskPairs(
        domains=["a"] * 4,
        splits=["dev", "test", "dev", "test"],
        new=["n0", "n1", "n2", "n3"],
        old=["o0", "o1", "o2", "o3"],
        sha256="",
    )
    task = ood.help_desk_task(file, "dev", ["d0", "o1", "n2", "d1"])  # a distractor may repeat an old or a new one
    assert task.corpus == ["o0", "o1", "o2", "o3", "d0", "n2", "d1"]
    assert task.queries == ["n0", "n2"]
    assert [task.corpus[int(r[0])] for r in task.relevant] == ["o0", "o2"]
    assert task.own.tolist() == [-1, 5]  # a query found verbatim among the distractors is left out of its ranking


def test_distractors_are_the_first_distinct_dev_questions_in_file_order_never_a_test_one(synthetic_pairs):
    config = SplitConfig(train_pool=20_000, test=2_000, dev=2_000)
    distractors = script().quora_distractors(synthetic_pairs, 500, config)
    dev = split_pairs(synthetic_pairs, config).dev
    in_order = []
    for a, b in zip(dev.q1, dev.q2):
        for q in (a, b):
            if q not in in_order:
                in_order.append(q)
    assert distractors == in_order[:500]


def test_a_broken_pairs_file_is_one_sentence_and_exit_2(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("domain\tsplit\tnew\told\nsoftware\tlater\tHow?\tWhy?\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(SCRIPT), "--pairs", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and "line 2" in done.stderr


def test_write_questions_writes_the_collection_one_a_line_and_never_a_new_question(tmp_path):
    ood = script()
    file = ood.HelpDeskPairs(
        domains=["home"] * 3,
        splits=["dev", "test", "dev"],
        new=["My tap drips, what now?", "Best way to unclog a sink?", "Why is my\nboiler loud?"],
        old=["How do I fix a leaking faucet?", "How can I clear a blocked drain?", "Why does my boiler bang?"],
        sha256="",
    )
    task = ood.help_desk_task(
        file, "dev", ["What is love?", "Why is the sky\nblue?", "How can I clear a blocked drain?"]
    )
    out = tmp_path / "runs" / "questions.txt"  # its folder does not exist yet
    ood.write_questions(task, out)
    written = out.read_text(encoding="utf-8").split("\n")
    assert written == [*file.old, "What is love?", "Why is the sky blue?", ""]  # each once; a newline inside is a space
    assert not set(written) & set(file.new)


@pytest.mark.real_data
def test_no_old_question_of_the_file_is_a_quora_question(all_pairs):
    """An old question is what a search must find: no Quora text may equal one (a distractor would merge with it).

    Ten of the 420 new questions are common enough that Quora has them verbatim (e.g. "How can I
    fall asleep faster?"); two are dev questions, and the search leaves a query's own entry out.
    """
    quora = {normalised(q) for q in np.concatenate([all_pairs.q1, all_pairs.q2])}
    found = [r[3] for r in rows()[1:] if normalised(r[3]) in quora]
    assert not found, found[:5]
