"""dupq.evaluation.tasks, the yardsticks of ``dupq evaluate --task``: each task against a loop of its own.

The help-desk file (``yardsticks/help_desks.tsv``) is checked as written; the help-desk task is
run with a fake model (a sum of seeded word vectors) and recounted query by query; Quora's pairs
task is recounted pair by pair on a model trained on synthetic pairs.
"""

from __future__ import annotations

import csv
import json
import re
import zlib
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig, read_pairs, split_pairs
from dupq.evaluation import tasks
from dupq.evaluation.retrieval import retrieval_measures
from dupq.modeling.model import ENCODE_BATCH, Model
from support.cli_model import cli_model
from support.errors import refused
from support.kit import ok


def normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def rows() -> list[list[str]]:
    with open(tasks.HELP_DESKS, newline="", encoding="utf-8") as f:
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
    read = tasks.read_help_desk_pairs()
    assert (read.new, read.old, read.splits) == ([r[2] for r in body], [r[3] for r in body], [r[1] for r in body])


def test_each_new_question_searches_every_old_question_and_the_distractors_and_finds_its_own_old_one():
    new, old = ["n0", "n1", "n2", "n3"], ["o0", "o1", "o2", "o3"]
    file = tasks.HelpDeskPairs(domains=["a"] * 4, splits=["dev", "test"] * 2, new=new, old=old, sha256="")
    task = tasks.help_desk_task(file, "dev", ["d0", "o1", "n2", "d1"])  # a distractor may repeat an old or a new one
    assert task.corpus == ["o0", "o1", "o2", "o3", "d0", "n2", "d1"]
    assert task.queries == ["n0", "n2"]
    assert [task.corpus[int(r[0])] for r in task.relevant] == ["o0", "o2"]
    assert task.own.tolist() == [-1, 5]  # a query found verbatim among the distractors is left out of its ranking


def test_distractors_are_the_first_distinct_dev_questions_in_file_order_never_a_test_one(synthetic_pairs):
    config = SplitConfig(train_pool=20_000, test=2_000, dev=2_000)
    distractors = tasks.quora_distractors(synthetic_pairs, 500, config)
    dev = split_pairs(synthetic_pairs, config).dev
    in_order = []
    for a, b in zip(dev.q1, dev.q2):
        for q in (a, b):
            if q not in in_order:
                in_order.append(q)
    assert distractors == in_order[:500]


def test_a_broken_help_desk_file_is_one_sentence_naming_its_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("domain\tsplit\tnew\told\nsoftware\tlater\tHow?\tWhy?\n", encoding="utf-8")
    says = "line 2: needs a domain, a split of dev or test and two questions."
    with pytest.raises(DupqError, match=f"^{re.escape(f'{bad}, {says}')}$"):
        tasks.read_help_desk_pairs(bad)


def ranked(vectors: np.ndarray, question: str) -> list[int]:
    """Every row of ``vectors`` (N, d) by its inner product with the question's WordSums vector, high to low."""
    scores = vectors @ WordSums().encode([question])[0].astype(np.float64)
    return sorted(range(len(vectors)), key=lambda j: (-scores[j], j))


class WordSums:
    """A fake model: a question's vector is the sum of a seeded random vector per word of 4 letters or more."""

    def encode(self, texts: list[str], batch_size: int = ENCODE_BATCH) -> np.ndarray:
        def word(w: str) -> np.ndarray:
            return np.random.default_rng(zlib.crc32(w.encode())).normal(size=256)

        out = np.stack([sum((word(w) for w in re.findall("[a-z]{4,}", t.lower())), np.full(256, 1e-3)) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_help_desks_recall_and_mrr_agree_with_a_loop_over_every_old_question(pairs_path, monkeypatch, split):
    distractors = [f"{q} today" for q in read_pairs(pairs_path)[0].q1[:300]]
    monkeypatch.setattr(tasks, "quora_distractors", lambda pairs: distractors)  # the synthetic file has no seed split
    result = tasks.run_task("help-desks", WordSums(), pairs_path, split)
    _, *body = rows()
    mine = [r for r in body if r[1] == split]
    corpus = list(dict.fromkeys([r[3] for r in body] + distractors))
    vectors = WordSums().encode(corpus).astype(np.float64)  # (N, d)
    first, reciprocal = [], []
    for _, _, new, old in mine:
        rank = ranked(vectors, new).index(corpus.index(old)) + 1
        first.append(rank == 1)
        reciprocal.append(1 / rank if rank <= 10 else 0.0)
    assert (result["split"], result["queries"], result["corpus"]) == (split, len(mine), len(corpus))
    assert (result["old_questions"], result["distractors"]) == (len(body), len(distractors))
    assert result["model"]["recall@1"] == pytest.approx(np.mean(first), abs=1e-12)
    assert result["model"]["p@1"] == pytest.approx(np.mean(first), abs=1e-12)
    assert result["model"]["mrr@10"] == pytest.approx(np.mean(reciprocal), abs=1e-12)
    assert 0.2 < result["model"]["recall@1"] and set(result["bm25"]) == set(result["model"])


@pytest.mark.usefixtures("one_torch_thread")
def test_dupq_evaluate_task_quora_pairs_dev_agrees_with_a_loop_over_the_dev_rows(pairs_path, tmp_path_factory):
    folder, data = cli_model(pairs_path, tmp_path_factory)  # rows 8,000-8,999 test, 9,000-9,999 dev
    command = ["evaluate", str(folder), "--data", str(data), "--json"]
    printed = json.loads(ok(*command, "--task", "quora-pairs", "--split", "dev").stdout)
    every = read_pairs(data)[0]
    dev = every.take(every.rows >= 9_000)
    model = Model.load(folder)
    scores = model.scores(dev.q1, dev.q2)
    right = sum((s > model.threshold) == (y == 1) for s, y in zip(scores, dev.labels))
    found = sum(s > model.threshold and y == 1 for s, y in zip(scores, dev.labels))
    assert printed["dev_rows"] == [9_000, 9_999] and printed["pairs"] == len(dev)
    assert printed["accuracy"] == pytest.approx(right / len(dev), abs=1e-12)
    assert printed["recall"] == pytest.approx(found / int(dev.labels.sum()), abs=1e-12)
    assert json.loads(ok(*command).stdout)["test_rows"] == [8_000, 8_999]  # the default: quora-pairs on the test rows


@pytest.mark.parametrize(
    "words, says",
    [
        (["--task", "nope"], "the tasks are quora-pairs, quora-retrieval, help-desks, clean-pairs."),
        (["--task", "clean-pairs", "--split", "dev"], "the clean pairs have no dev half"),
        (["--task", "help-desks", "--threshold", "0.5"], "takes no threshold"),
        (["--task", "clean-pairs", "--split", "train"], "the split is test or dev"),
    ],
)
def test_a_task_asked_for_wrongly_is_one_sentence_and_exit_2(words, says):
    refused(CliRunner().invoke(app, ["evaluate", *words]), says)


def test_judged_without_search_is_one_sentence_and_exit_2(tmp_path):
    refused(CliRunner().invoke(app, ["calibrate", str(tmp_path), "--judged"]), "--judged goes with --search.")


@pytest.mark.real_data
def test_no_old_question_of_the_file_is_a_quora_question(all_pairs):
    """An old question is what a search must find: no Quora text may equal one (a distractor would merge with it).

    Ten of the 420 new questions are common enough that Quora has them verbatim (e.g. "How can I
    fall asleep faster?"); two are dev questions, and the search leaves a query's own entry out.
    """
    quora = {normalised(q) for q in np.concatenate([all_pairs.q1, all_pairs.q2])}
    found = [r[3] for r in rows()[1:] if normalised(r[3]) in quora]
    assert not found, found[:5]


def judged_file(tmp_path, lines: list[str]):
    path = tmp_path / "judged.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_judged_file_keeps_the_duplicates_of_each_new_question_and_skips_the_rule(tmp_path):
    rows = ["# rule: 1 if one answer serves both", "split\tnew\tcandidate\tlabel"]
    path = judged_file(tmp_path, [*rows, "dev\tn0\td0\t1", "dev\tn0\td1\t0", "test\tn1\td0\t1"])
    assert tasks.read_judged(path) == {("dev", "n0"): {"d0"}, ("test", "n1"): {"d0"}}


@pytest.mark.parametrize("line", ["dev\tn0\td0\tyes", "later\tn0\td0\t1", "dev\tn0\t1", "dev\t \td0\t1"])
def test_a_bad_judged_row_is_one_sentence_naming_its_line(tmp_path, line):
    path = judged_file(tmp_path, ["# rule", "split\tnew\tcandidate\tlabel", line])
    says = "line 3: needs a split of dev or test, two questions and a label of 0 or 1."
    with pytest.raises(DupqError, match=f"^{re.escape(f'{path}, {says}')}$"):
        tasks.read_judged(path)


def test_a_judged_file_without_its_header_is_refused(tmp_path):
    with pytest.raises(DupqError, match="needs the header split / new / candidate / label"):
        tasks.read_judged(judged_file(tmp_path, ["dev\tn0\td0\t1"]))


def test_the_shipped_judged_file_reads_and_names_only_questions_of_the_help_desks():
    judged = tasks.read_judged()
    file = tasks.read_help_desk_pairs()
    assert judged and all((s, n) in set(zip(file.splits, file.new)) for s, n in judged)


def test_judged_relevance_changes_recall_exactly_as_a_loop_over_every_question_counts(pairs_path):
    file = tasks.read_help_desk_pairs()
    distractors = [f"{q} today" for q in read_pairs(pairs_path)[0].q1[:300]]
    corpus = list(dict.fromkeys([*file.old, *distractors]))
    vectors = WordSums().encode(corpus).astype(np.float64)  # (N, d)
    dev = [i for i, s in enumerate(file.splits) if s == "dev"]
    first = {}  # each dev new question's top hit other than its own old one: judged a duplicate for half of them
    for i in dev:
        first[i] = next(corpus[j] for j in ranked(vectors, file.new[i]) if corpus[j] != file.old[i])
    judged = {("dev", file.new[i]): {first[i], "a question not in the collection"} for i in dev[::2]}
    as_written = retrieval_measures(WordSums().encode, tasks.help_desk_task(file, "dev", distractors))
    measured = retrieval_measures(WordSums().encode, tasks.help_desk_task(file, "dev", distractors, judged))
    top, found10 = [], []
    for i in dev:
        relevant = {file.old[i]} | ({first[i]} if ("dev", file.new[i]) in judged else set())
        top10 = [corpus[j] for j in ranked(vectors, file.new[i])[:10]]
        top.append(top10[0] in relevant)
        found10.append(len(relevant & set(top10)) / len(relevant))
    assert measured["p@1"] == pytest.approx(np.mean(top), abs=1e-12)
    assert measured["recall@10"] == pytest.approx(np.mean(found10), abs=1e-12)
    assert measured["p@1"] > as_written["p@1"]  # half the queries whose top hit was wrong are now right
