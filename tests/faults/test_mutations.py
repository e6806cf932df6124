"""The fault tests can fail: run against a deliberately broken dupq, each reports the fault it names.

A test that cannot fail proves nothing: ``test_nan_in_json_output`` once let NaN stay a string
that never reached the check, and ``test_adds_after_a_failing_commit`` retried with keys, so a
second store could not happen. Here each test that could hide a fault runs once with a
**mutation**, a small change that puts back the fault it names (NaN allowed in metadata and JSON
output, an add that fails after its commit, no nesting limit, no headers on a bug's 500, ...),
and must fail.

A mutation is Python run in this process (``patch`` is ``monkeypatch.setattr``) and, through
``faultkit.DUPQ``, in every ``dupq`` process the test starts (``patch`` is ``setattr`` there).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import faultkit
import pytest
import test_api_faults as api
import test_collection_faults as collection
import test_decision_faults as decisions
import test_dedup_faults as dedup
import test_file_faults as files
import test_filter_faults as filters
import test_model_faults as models
import test_rule_faults as rules
import test_service_faults as service

pytestmark = pytest.mark.faults


def broken(monkeypatch, tmp_path: Path, mutation: str) -> None:
    """Apply ``mutation`` here and in every ``dupq`` command the tests run."""
    exec(mutation, {"patch": monkeypatch.setattr})
    (tmp_path / "fault_mutation.py").write_text("patch = setattr\n" + mutation)
    # Every Python process on the path imports sitecustomize at start: the workers `dupq serve` spawns too.
    (tmp_path / "sitecustomize.py").write_text("import fault_mutation  # noqa: F401\n")
    command = [sys.executable, "-c", "import fault_mutation\nfrom dupq.cli import main\nmain()"]
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setattr(faultkit, "DUPQ", command)
    monkeypatch.setattr(faultkit, "ENV", {**faultkit.ENV, "PYTHONPATH": path})


def run_broken(test, mutation: str, monkeypatch, tmp_path: Path, **params) -> pytest.ExceptionInfo:
    """Run the fault test ``test`` against dupq with ``mutation``: how it failed (it must)."""
    broken(monkeypatch, tmp_path, mutation)
    (tmp_path / "case").mkdir()
    if "monkeypatch" in inspect.signature(test).parameters:
        params["monkeypatch"] = monkeypatch
    with pytest.raises(AssertionError) as failed:
        test(tmp_path / "case", **params)
    return failed


NAN_STORED = """
import json
import dupq.collection.collection as collection
import dupq.core.files as files
import dupq.cli.search as search

def lenient(metadata, n):  # NaN allowed into the store, as before the check
    return [json.dumps(m) if m else None for m in (metadata or [None] * n)]

patch(collection, "check_metadata", lenient)
patch(files, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
patch(search, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
"""

NAN_READ = """
import json
import dupq.collection.collection as collection
import dupq.collection.hits as hits
import dupq.core.files as files
import dupq.cli.search as search

patch(collection, "read_metadata", lambda text: (json.loads(text) if text else {}, None))
patch(hits, "read_metadata", lambda text: (json.loads(text) if text else {}, None))  # a search's hits read there
patch(files, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
patch(search, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
"""

FAILS_AFTER_COMMIT = """
from dupq.collection.collection import Collection

stored = Collection.add

def add(self, texts, metadata=None, keys=None, **options):  # the rows are committed, then the add fails anyway
    stored(self, texts, metadata, keys, **options)
    raise RuntimeError("the cache could not be written")

patch(Collection, "add", add)
"""

NO_DEPTH_LIMIT = """
import dupq.collection.rows as rows
import dupq.service.middleware as middleware

patch(middleware, "json_depth", lambda text, limit=None: 0)
patch(rows, "nesting", lambda value, limit=None: 0)
"""

BARE_500 = """
from dupq.service.middleware import SecurityHeaders, SECURITY_HEADERS

async def call(self, scope, receive, send):  # headers added, but a bug's exception passes through
    async def with_headers(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
        await send(message)

    await self.app(scope, receive, with_headers)

patch(SecurityHeaders, "__call__", call)
"""

LENIENT_METADATA = """
import json
import dupq.collection.collection as collection
import dupq.collection.hits as hits

lenient = lambda text: (json.loads(text) if text else {}, None)
patch(collection, "read_metadata", lenient)
patch(hits, "read_metadata", lenient)  # a search's hits read their metadata there
"""

NAN_VECTORS_PASS = """
import dupq.collection.folder.sqlite as sqlite

patch(sqlite, "_check_finite", lambda *args, **kwargs: None)
"""

ALL_400 = """
import dupq.service.errors as errors

patch(errors, "answer_to", lambda e: (400, str(e), {}))
"""

NO_HEADER_DEADLINE = """
from dupq.service.connections import HeaderDeadline

patch(HeaderDeadline, "_arm", lambda self: None)
"""

NO_FILE_DEPTH_LIMIT = """
import dupq.core.files as files

patch(files, "json_depth", lambda text, limit=None: 0)
"""

NO_FOLDER_RULE = """
import sys
import dupq.core.files as files

# Importing dupq.core.files imports the package, whose modules (the model folders') bound the rule by name already.
rule = files.check_new_folder
for module in [m for m in list(sys.modules.values()) if getattr(m, "check_new_folder", None) is rule]:
    patch(module, "check_new_folder", lambda folder, overwrite=False: folder)
"""

TEXT_COMPARED = """
import dupq.collection.folder.store as store
import dupq.collection.rows as rows

for module in (rows, store):  # the key rule (place) and the folder's update both compare
    patch(module, "same_metadata", lambda a, b: a == b)
"""

ANY_TOKEN = """
import os
import dupq.service.app as app
import dupq.service.auth as auth
import dupq.service.server as server

def lenient(token=None):  # any token but none at all, as before the check
    return token if token is not None else os.environ.get(auth.TOKEN_ENV) or None

for module in (auth, app, server):
    patch(module, "write_token", lenient)
"""

ONE_LABEL_CALIBRATES = """
import dupq.evaluation.evaluate as evaluate

patch(evaluate, "check_dev_labels", lambda labels: None)
"""

DECISION_FIELDS_UNCHECKED = """
import dupq.collection.decisions as decisions
import dupq.collection.rows as rows

for module in (rows, decisions):  # any type in the reserved fields, as before the rule
    patch(module, "decision_problem", lambda metadata: None)
"""

JUDGED_TEXTS_IGNORED = """
import dupq.collection.decisions as decisions

# the digest kept at a decision and the one compared on reading
patch(decisions, "judged_digest", lambda text, other: "same")
"""

CYCLES_ALLOWED = """
import dupq.collection.decisions as decisions

patch(decisions, "refuse_cycle", lambda find, key, canonical: None)
"""

BARE_CR_UNQUOTED = """
import csv
import dupq.data.pairs as pairs

def write_pairs(path, rows):  # the csv module's quoting alone, as before
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\\t", lineterminator="\\n")
        writer.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        writer.writerows((i, *row) for i, row in enumerate(rows))

patch(pairs, "write_pairs", write_pairs)
"""

DECISIONS_TRUSTED = """
import dupq.evaluation.evaluate as evaluate

patch(evaluate, "calibrate_on_decisions", lambda model, pairs, log=print: evaluate.calibrate(model, pairs))
"""

TYPED_FILTER_ONLY = """
import dupq.collection.backend as backend

def typed(pairs):  # a value that reads as a number is that number alone, as before
    import json
    where = {}
    for field, value in pairs:
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        where.setdefault(field, []).append(parsed if isinstance(parsed, (int, float)) else value)
    return where

patch(backend, "where_from_text", typed)
"""

NUL_STORED = """
import dupq.collection.rows as rows

patch(rows, "holds_nul", lambda value: False)
"""

CONTROL_IN_FILTERS = """
import re
import dupq.collection.backend as backend

patch(backend, "TEXT", re.compile(r"(?s).*"))
"""

WORK_NOT_MARKED = """
import dupq.dedup.run as run

patch(run, "MARKER", "state.json")  # any folder holding a state.json taken for dupq's own, as before the marker
"""

OUTPUT_OVER_INPUT = """
import sys
import dupq.core.files as files

rule = files.check_apart
for module in [m for m in list(sys.modules.values()) if getattr(m, "check_apart", None) is rule]:
    patch(module, "check_apart", lambda out, *inputs: None)
"""

KEYS_GUARDED = """
import dupq.dedup.run as run

patch(run, "VERBATIM", set())  # keys made inert like texts, as before
"""

VECTORS_BY_POSITION = """
import numpy as np
from dupq.collection.collection import Collection

patch(Collection, "stored_vectors", lambda self, ids=None: self._backend.all_vectors()[np.asarray(ids)])
"""

STALE_OUTPUT_KEPT = """
import dupq.dedup.run as run

patch(run, "remove_stale", lambda folder, old=3600.0: [])
"""

CLUSTER_UNWATCHED = """
import dupq.dedup.ray_engine as engine

patch(engine, "WATCH", 3600.0)  # wait on Ray alone, as before: its fatal log after a minute
"""

ANY_FOLDER_REPLACED = """
import sys
import dupq.core.files as files
import dupq.modeling.folder_format as folder_format

rule = folder_format.check_new_model_folder
for module in [m for m in list(sys.modules.values()) if getattr(m, "check_new_model_folder", None) is rule]:
    patch(module, "check_new_model_folder", files.check_new_folder)  # the folder rule alone: --overwrite replaces anything
"""

STATIC_WORDS_UNCHECKED = """
import json
import dupq.modeling.static as static

patch(static, "read_json", lambda path, what: json.loads(open(path, encoding="utf-8").read()))
"""

ANY_JOIN_WEIGHT = """
import dupq.core.files as files
import dupq.modeling.static as static
import dupq.training.distil.export as export

for module in (static, export):  # any weight, and the folder renamed in without being loaded back
    patch(module, "check_weight", lambda weight, name: weight)
patch(export, "new_model_folder", files.new_folder)
"""

JOINED_BRANCH_IGNORED = """
from dupq.modeling.sentence_model import JoinedEncoder

patch(JoinedEncoder, "without_branch", lambda self: self)
"""

WHITESPACE_WORDS = """
import dupq.modeling.static as static
import dupq.training.adapt as adapt

for module in (static, adapt):  # the branch's words as the seed's split alone gives them
    patch(module, "word_parts", lambda word: [word])
patch(adapt, "unspaced_scripts", lambda words: {})
"""


KEY_ONE_SEGMENT = """
import dupq.service.routes.questions as questions

for route in questions.router.routes:  # a key is one path segment again: "faq/17" reaches no route
    patch(route, "path", route.path.replace(":path}", "}"))
"""

SLASH_REDIRECTS = """
import fastapi
import dupq.service.app as app

patch(app, "FastAPI", lambda **kw: fastapi.FastAPI(**{**kw, "redirect_slashes": True}))
"""

NO_READ_TOKEN = """
import dupq.service.auth as auth
import dupq.service.server as server

for module in (auth, server):  # $DUPQ_READ_TOKEN ignored, as before there was one
    patch(module, "read_token", lambda token=None, write=None: None)
"""

EMPTY_BODY_PASSES = """
import dupq.service.schemas as schemas

patch(schemas, "fields_given", lambda body, least, most: body)
"""

DEAD_SERIES_KEPT = """
import dupq.service.workers as workers

patch(workers, "forget_worker", lambda pid: None)
"""

PING_WAITS = """
import dupq.service.workers as workers

patch(workers, "watch", lambda process: None)  # uvicorn's ping: waits its whole timeout for a dead worker
"""

INHERITED_METRICS = """
import dupq.service.workers as workers

patch(workers, "refuse_inherited_metrics", lambda: None)
"""


@pytest.mark.parametrize(
    "test, mutation, params",
    [
        (collection.test_nan_in_json_output, NAN_STORED, {}),
        (collection.test_nan_in_json_output, NAN_READ, {}),
        (service.test_adds_after_a_failing_commit, FAILS_AFTER_COMMIT, {}),
        (service.test_deeply_nested_bodies, NO_DEPTH_LIMIT, {}),
        (service.test_security_headers_everywhere, BARE_500, {}),
        (collection.test_damaged_metadata_rows, LENIENT_METADATA, {}),
        (collection.test_nan_embedding_on_open, NAN_VECTORS_PASS, {}),
        (service.test_server_side_failures_are_5xx, ALL_400, {}),
        (service.test_idle_and_trickling_connections, NO_HEADER_DEADLINE, {}),
        (files.test_nested_json_in_model_files, NO_FILE_DEPTH_LIMIT, {"name": "config.json"}),
        (files.test_compact_over_an_existing_folder, NO_FOLDER_RULE, {}),
        (rules.test_keyed_retries_compare_values, TEXT_COMPARED, {}),
        (rules.test_blank_and_unsendable_tokens, ANY_TOKEN, {}),
        (rules.test_calibrate_on_a_single_label, ONE_LABEL_CALIBRATES, {}),
        (decisions.test_reserved_decision_fields, DECISION_FIELDS_UNCHECKED, {}),
        (decisions.test_decisions_follow_the_texts_judged, JUDGED_TEXTS_IGNORED, {}),
        (decisions.test_decisions_name_living_questions_without_cycles, CYCLES_ALLOWED, {}),
        (decisions.test_pair_files_round_trip, BARE_CR_UNQUOTED, {}),
        (decisions.test_calibrate_on_untrustworthy_decisions, DECISIONS_TRUSTED, {}),
        (filters.test_typed_filters_on_text_metadata, TYPED_FILTER_ONLY, {}),
        (filters.test_nul_in_metadata_and_filters, NUL_STORED, {}),
        (filters.test_control_characters_in_a_milvus_filter, CONTROL_IN_FILTERS, {}),
        (dedup.test_a_work_folder_dupq_did_not_make, WORK_NOT_MARKED, {}),
        (dedup.test_an_output_over_an_input, OUTPUT_OVER_INPUT, {}),
        (dedup.test_keys_round_trip, KEYS_GUARDED, {}),
        (dedup.test_dedup_a_living_collection, VECTORS_BY_POSITION, {}),
        (dedup.test_no_leftovers_of_a_refused_or_killed_run, STALE_OUTPUT_KEPT, {}),
        pytest.param(
            dedup.test_a_ray_cluster_that_dies_mid_run, CLUSTER_UNWATCHED, {}, marks=[pytest.mark.ray, pytest.mark.slow]
        ),
        (files.test_overwrite_replaces_only_a_model, ANY_FOLDER_REPLACED, {}),
        (models.test_a_damaged_static_words_file, STATIC_WORDS_UNCHECKED, {"damage": "nested"}),
        (models.test_join_weights_out_of_range, ANY_JOIN_WEIGHT, {}),
        (models.test_compact_no_branch_of_a_joined_model, JOINED_BRANCH_IGNORED, {}),
        (models.test_adapt_words_beyond_ascii, WHITESPACE_WORDS, {}),
        (api.test_keys_with_a_slash, KEY_ONE_SEGMENT, {}),
        (api.test_no_redirect_to_a_clients_host, SLASH_REDIRECTS, {}),
        (api.test_a_read_token, NO_READ_TOKEN, {}),
        (api.test_empty_bodies_are_422, EMPTY_BODY_PASSES, {}),
        (api.test_a_killed_worker, DEAD_SERIES_KEPT, {}),
        (api.test_a_worker_that_dies_during_a_health_check, PING_WAITS, {}),
        (api.test_an_inherited_metrics_folder, INHERITED_METRICS, {}),
    ],
    ids=[
        "nan-stored",
        "nan-read",
        "fails-after-commit",
        "no-depth-limit",
        "bare-500",
        "lenient-metadata",
        "nan-vectors",
        "all-400",
        "no-header-deadline",
        "no-file-depth-limit",
        "no-folder-rule",
        "text-compared",
        "any-token",
        "one-label-calibrates",
        "decision-fields-unchecked",
        "judged-texts-ignored",
        "cycles-allowed",
        "bare-cr-unquoted",
        "decisions-trusted",
        "typed-filter-only",
        "nul-stored",
        "control-in-filters",
        "work-not-marked",
        "output-over-input",
        "keys-guarded",
        "vectors-by-position",
        "stale-output-kept",
        "cluster-unwatched",
        "any-folder-replaced",
        "static-words-unchecked",
        "any-join-weight",
        "joined-branch-ignored",
        "whitespace-words",
        "key-one-segment",
        "slash-redirects",
        "no-read-token",
        "empty-body-passes",
        "dead-series-kept",
        "ping-waits",
        "inherited-metrics",
    ],
)
def test_a_fault_test_fails_on_the_fault_it_names(test, mutation, params, monkeypatch, tmp_path):
    run_broken(test, mutation, monkeypatch, tmp_path, **params)


def test_a_failing_commit_shows_as_a_second_store(monkeypatch, tmp_path):
    """The blind spot itself: without keys, an add that fails after its commit is stored twice, and the test says so."""
    failed = run_broken(service.test_adds_after_a_failing_commit, FAILS_AFTER_COMMIT, monkeypatch, tmp_path)
    assert failed.match(r"[1-9]\d* stored twice; answers \[.*500")
