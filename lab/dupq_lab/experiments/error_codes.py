"""Questions that name an error code: is the old question with the same code first?

The queries are the new questions of the help-desk yardstick (``help_desks.tsv``) and of its
error-code companion (``error_codes.tsv``: 42 hand-written pairs, a new question and the old one
with the same code, six codes a product, each product's codes split between dev and test), those
that name a code by :func:`dupq.data.codes.codes`. Each searches one corpus: every old question of
both files plus the help-desk task's 19,862 Quora dev questions (:mod:`dupq.evaluation.tasks`).

Three searches, exact (a flat index), as a collection makes them: the fast model alone (``--model``,
default the bundled one); its top :data:`~dupq.collection.rerank.RERANK_CANDIDATES` ordered by the
reranker's cosine (``--rerank``, a collection built with ``--rerank``); the reranker alone over
every question. Each also with the exact-code rule, as search engines keep a rare term exact:

* ``codes first``: among a search's candidates (its top K), those that share a code of the query
  (:func:`~dupq.data.codes.shared_codes`, a whole token) come first, in the search's order;
* ``codes added``: the same, the stored questions sharing a code added to the candidates first
  (found by their tokens, as a full-text index would find them).

Recall@1 on the queries with a code, on all queries, and on the help-desk yardstick's own queries,
per half; ``chosen``: the rule with the best dev Recall@1 on code queries whose dev Recall@1 on all
queries is not lower than without it (ties: the simplest). Test is only reported.

Prints one JSON line: {"rule", "queries": {half: {"with_code", "all"}}, "corpus", "recall@1":
{half: {search: {"codes", "all", "help_desks"}}}, "chosen"}.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated

import numpy as np
import typer

from dupq.collection.rerank import RERANK_CANDIDATES
from dupq.data.codes import codes, shared_codes, tokens
from dupq.data.pairs import default_data_path, read_pairs
from dupq.evaluation.tasks import YARDSTICKS, help_desk_task, quora_distractors, read_help_desk_pairs
from dupq.modeling.model import Model
from dupq_lab.options import DATA, RUNS, Data, ModelFolder
from dupq_lab.vector_cache import DigestCache

ERROR_CODES = YARDSTICKS / "error_codes.tsv"
RULES = ("none", "codes first", "codes added")  # simplest first: a tie keeps the simpler rule
CACHE = RUNS / "error-codes"


def ranked(scores: np.ndarray, own: int, depth: int) -> list[int]:
    """The ``depth`` best ids by ``scores (N,)``, the query's own entry left out (stable on ties)."""
    order = np.argsort(-scores, kind="stable")[: depth + 1]
    return [int(i) for i in order if i != own][:depth]


def with_rule(rule: str, order: list[int], wanted: frozenset[str], corpus: list[str], holders: dict) -> list[int]:
    """``order`` (a search's candidates, best first) with the rule applied: the candidates sharing a code of the
    query first ("codes first"), and with the stored questions holding one added ("codes added")."""
    if rule == "none" or not wanted:
        return order
    pool = list(order)
    if rule == "codes added":
        pool += sorted({i for c in wanted for i in holders.get(c, ())} - set(order))
    sharing = [i for i in pool if shared_codes(wanted, corpus[i])]
    return sharing + [i for i in pool if i not in set(sharing)]


def main(
    model: ModelFolder = None, rerank: Annotated[str, typer.Option(metavar="MODEL")] = "minilm", data: Data = DATA
) -> None:
    fast, reranker = Model.load(model), Model.load(rerank)
    desks, extra = read_help_desk_pairs(), read_help_desk_pairs(ERROR_CODES)
    both = replace(desks, **{f: getattr(desks, f) + getattr(extra, f) for f in ("domains", "splits", "new", "old")})
    distractors = quora_distractors(read_pairs(data or default_data_path())[0])
    tasks = {half: help_desk_task(both, half, distractors) for half in ("dev", "test")}
    corpus = tasks["dev"].corpus
    holders: dict[str, list[int]] = {}
    for i, text in enumerate(corpus):  # each token of the corpus's codes -> the questions that hold it
        for token in tokens(text):
            holders.setdefault(token, []).append(i)
    fast_encode = DigestCache(fast, CACHE / f"fast-{fast.fingerprint()}")  # each text encoded once, kept
    rerank_encode = DigestCache(reranker, CACHE / f"rerank-{reranker.fingerprint()}")
    v, r = fast_encode(corpus), rerank_encode(corpus)  # (N, d), (N, d')
    own_desk = set(desks.new)
    out = {"rule": "dupq.data.codes.codes", "model": str(model or "bundled"), "rerank": rerank}
    out |= {"candidates": RERANK_CANDIDATES, "corpus": len(corpus), "queries": {}, "recall@1": {}, "found": {}}
    for half, task in tasks.items():
        qv, qr = fast_encode(task.queries), rerank_encode(task.queries)
        wanted = [codes(q) for q in task.queries]
        coded = np.array([bool(w) for w in wanted])
        desk = np.array([q in own_desk for q in task.queries])
        out["queries"][half] = {"with_code": int(coded.sum()), "all": len(task.queries), "help_desks": int(desk.sum())}
        out["found"][half] = {"with_code": [q for q, w in zip(task.queries, wanted) if w]}
        searches = {}
        for q in range(len(task.queries)):
            own, right = int(task.own[q]), int(task.relevant[q][0])
            top = ranked(v @ qv[q], own, RERANK_CANDIDATES)  # the fast model's candidates
            cos = r[top] @ qr[q]  # (K,)
            orders = {
                "model": top,
                "model + rerank": [top[j] for j in np.argsort(-cos, kind="stable")],
                "rerank alone": ranked(r @ qr[q], own, RERANK_CANDIDATES),
            }
            for name, order in orders.items():
                for rule in RULES:
                    first = with_rule(rule, order, wanted[q], corpus, holders)
                    searches.setdefault(f"{name} | {rule}", []).append(bool(first) and first[0] == right)
        out["recall@1"][half] = {
            name: {
                "codes": round(float(np.mean(np.array(hits)[coded])), 4) if coded.any() else None,
                "all": round(float(np.mean(hits)), 4),
                "help_desks": round(float(np.mean(np.array(hits)[desk])), 4),
            }
            for name, hits in searches.items()
        }
    dev = out["recall@1"]["dev"]
    out["chosen"] = {}
    for name in ("model", "model + rerank", "rerank alone"):
        base = dev[f"{name} | none"]["all"]
        allowed = [rule for rule in RULES if dev[f"{name} | {rule}"]["all"] >= base]
        out["chosen"][name] = max(allowed, key=lambda rule: (dev[f"{name} | {rule}"]["codes"], -RULES.index(rule)))
    print(json.dumps(out))
