"""The fault tests can fail: run against a deliberately broken dupq, each reports the fault it names.

A test that cannot fail proves nothing (``test_nan_in_json_output`` once let NaN stay a string that never reached
the check). Each test that could hide a fault runs here once with a **mutation**, a small change that puts back
the fault it names, and must fail. A mutation is Python run in this process (``patch`` is
``monkeypatch.setattr``) and, through ``faultkit.DUPQ``, in every ``dupq`` process the test starts (``setattr``).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import faultkit
import pytest
import test_api_faults as api
import test_collection_damage as damage
import test_collection_faults as collection
import test_decision_faults as decisions
import test_dedup_faults as dedup
import test_file_faults as files
import test_filter_faults as filters
import test_model_faults as models
import test_rule_faults as rules
import test_service as service
import test_service_limits as limits

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
    monkeypatch.setenv("PYTHONPATH", path)  # and a `dupq` started with this process's environment


def run_broken(test, mutation: str, monkeypatch, tmp_path: Path, **params) -> pytest.ExceptionInfo:
    """Run the fault test ``test`` against dupq with ``mutation``: how it failed (it must). A fault test takes its
    working folder (``tmp_path``); one kept in tests/collection or tests/service takes the collection it works on,
    made here: 40 keyed questions with metadata, as :func:`faultkit.build` makes them."""
    if next(iter(inspect.signature(test).parameters)) != "tmp_path":
        faultkit.build(tmp_path / "case", keys=True, metadata=True)
    else:
        (tmp_path / "case").mkdir()
    broken(monkeypatch, tmp_path, mutation)
    if "monkeypatch" in inspect.signature(test).parameters:
        params["monkeypatch"] = monkeypatch
    with pytest.raises(AssertionError) as failed:
        test(tmp_path / "case", **params)
    return failed


def patched(targets: str, name: str, value: str, bound: bool = False) -> str:
    """A mutation setting ``name`` to ``value`` (Python; json, os and re imported) in each of ``targets``: modules
    or ``module:Class``, space-separated. ``bound``: in every loaded module that bound the first one's ``name`` too."""
    modules = [t.partition(":")[0] for t in targets.split()]
    targets = [t.replace(":", ".") for t in targets.split()]
    code = "import json\nimport os\nimport re\n" + "".join(f"import {m}\n" for m in modules)
    if bound:
        return code + (
            f"import sys\nrule = {targets[0]}.{name}\n"
            f"for module in [m for m in list(sys.modules.values()) if getattr(m, {name!r}, None) is rule]:\n"
            f"    patch(module, {name!r}, {value})\n"
        )
    return code + "".join(f"patch({t}, {name!r}, {value})\n" for t in targets)


TO_JSON = patched("dupq.core.files dupq.cli.search", "to_json", "lambda obj, **kwargs: json.dumps(obj, **kwargs)")
LENIENT = "lambda text: (json.loads(text) if text else {}, None)"
# NaN allowed into the store, or read back from it, as before the checks
UNCHECKED = "lambda m, n: [json.dumps(x) if x else None for x in (m or [None] * n)]"
NAN_STORED = TO_JSON + patched("dupq.collection.collection", "check_metadata", UNCHECKED)
# a search's hits read their metadata in hits.py
LENIENT_METADATA = patched("dupq.collection.collection dupq.collection.hits", "read_metadata", LENIENT)
NAN_READ = TO_JSON + LENIENT_METADATA
NO_DEPTH_LIMIT = patched("dupq.service.middleware", "json_depth", "lambda text, limit=None: 0")
NO_DEPTH_LIMIT += patched("dupq.collection.rows", "nesting", "lambda value, limit=None: 0")
NAN_VECTORS_PASS = patched("dupq.collection.folder.sqlite", "_check_finite", "lambda *args, **kwargs: None")
ALL_400 = patched("dupq.service.errors", "answer_to", "lambda e: (400, str(e), {})")
NO_HEADER_DEADLINE = patched("dupq.service.connections:HeaderDeadline", "_arm", "lambda self: None")
NO_FILE_DEPTH_LIMIT = patched("dupq.core.files", "json_depth", "lambda text, limit=None: 0")
# dupq.core.files imports the package, whose modules (the model folders') bound the rule by name already
NO_FOLDER_RULE = patched("dupq.core.files", "check_new_folder", "lambda folder, overwrite=False: folder", bound=True)
# the key rule (place) and the folder's update both compare
TEXT_COMPARED = patched("dupq.collection.rows dupq.collection.folder.store", "same_metadata", "lambda a, b: a == b")
ONE_LABEL_CALIBRATES = patched("dupq.evaluation.evaluate", "check_dev_labels", "lambda labels: None")
# any type in the reserved fields, as before the rule
DECISION_FIELDS_UNCHECKED = patched(
    "dupq.collection.rows dupq.collection.decisions", "decision_problem", "lambda m: None"
)
# the digest kept at a decision and the one compared on reading
JUDGED_TEXTS_IGNORED = patched("dupq.collection.decisions", "judged_digest", "lambda text, other: 'same'")
CYCLES_ALLOWED = patched("dupq.collection.decisions", "refuse_cycle", "lambda find, key, canonical: None")
PLAIN_CALIBRATE = "lambda m, pairs, log=print: dupq.evaluation.evaluate.calibrate(m, pairs)"
DECISIONS_TRUSTED = patched("dupq.evaluation.evaluate", "calibrate_on_decisions", PLAIN_CALIBRATE)
NUL_STORED = patched("dupq.collection.rows", "holds_nul", "lambda value: False")
# any folder holding a state.json taken for dupq's own, as before the marker
WORK_NOT_MARKED = patched("dupq.dedup.run", "MARKER", "'state.json'")
OUTPUT_OVER_INPUT = patched("dupq.core.files", "check_apart", "lambda out, *inputs: None", bound=True)
KEYS_GUARDED = patched("dupq.dedup.run", "VERBATIM", "set()")  # keys made inert like texts, as before
STALE_OUTPUT_KEPT = patched("dupq.dedup.run", "remove_stale", "lambda folder, old=3600.0: []")
# wait on Ray alone, as before: its fatal log after a minute
CLUSTER_UNWATCHED = patched("dupq.dedup.ray_engine", "WATCH", "3600.0")
# the folder rule alone: --overwrite replaces anything
MODEL_FORMAT = "dupq.modeling.folder_format dupq.core.files"
ANY_FOLDER_REPLACED = patched(MODEL_FORMAT, "check_new_model_folder", "dupq.core.files.check_new_folder", bound=True)
READ_JSON = "lambda path, what: json.loads(open(path, encoding='utf-8').read())"
STATIC_WORDS_UNCHECKED = patched("dupq.modeling.static", "read_json", READ_JSON)
# any weight, and the folder renamed in without being loaded back
ANY_JOIN_WEIGHT = patched("dupq.modeling.static dupq.training.distil.export", "check_weight", "lambda w, name: w")
ANY_JOIN_WEIGHT += patched("dupq.training.distil.export", "new_model_folder", "dupq.core.files.new_folder")
JOINED_BRANCH_IGNORED = patched("dupq.modeling.sentence_model:JoinedEncoder", "without_branch", "lambda self: self")
# the branch's words as the seed's split alone gives them
WHITESPACE_WORDS = patched("dupq.modeling.static dupq.training.adapt", "word_parts", "lambda word: [word]")
WHITESPACE_WORDS += patched("dupq.training.adapt", "unspaced_scripts", "lambda words: {}")
# any token but none at all, as before the check
LENIENT_TOKEN = "lambda token=None: token if token is not None else os.environ.get(dupq.service.auth.TOKEN_ENV) or None"
ANY_TOKEN = patched("dupq.service.auth dupq.service.app dupq.service.server", "write_token", LENIENT_TOKEN)
# $DUPQ_READ_TOKEN ignored, as before there was one
NO_READ_TOKEN = patched("dupq.service.auth dupq.service.server", "read_token", "lambda token=None, write=None: None")
EMPTY_BODY_PASSES = patched("dupq.service.schemas", "fields_given", "lambda body, least, most: body")
DEAD_SERIES_KEPT = patched("dupq.service.workers", "forget_worker", "lambda pid: None")
# uvicorn's ping: waits its whole timeout for a dead worker
PING_WAITS = patched("dupq.service.workers", "watch", "lambda process: None")
INHERITED_METRICS = patched("dupq.service.workers", "refuse_inherited_metrics", "lambda: None")
CONTROL_IN_FILTERS = patched("dupq.collection.backend", "TEXT", "re.compile(r'(?s).*')")
BY_POSITION = "lambda self, ids=None: self._backend.all_vectors()[list(ids)]"
VECTORS_BY_POSITION = patched("dupq.collection.collection:Collection", "stored_vectors", BY_POSITION)

FAILS_AFTER_COMMIT = """
from dupq.collection.collection import Collection

stored = Collection.add

def add(self, texts, metadata=None, keys=None, **options):  # the rows are committed, then the add fails anyway
    stored(self, texts, metadata, keys, **options)
    raise RuntimeError("the cache could not be written")

patch(Collection, "add", add)
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


CASES = {  # id: (the fault test, the mutation it must fail on, the test's parameters)
    "nan-stored": (collection.test_nan_in_json_output, NAN_STORED, {}),
    "nan-read": (collection.test_nan_in_json_output, NAN_READ, {}),
    "fails-after-commit": (service.test_concurrent_adds_after_a_failing_commit_are_stored_once, FAILS_AFTER_COMMIT, {}),
    "no-depth-limit": (limits.test_deeply_nested_bodies_are_refused_before_parsing, NO_DEPTH_LIMIT, {}),
    "bare-500": (limits.test_a_bugs_500_carries_the_security_headers, BARE_500, {}),
    "lenient-metadata": (damage.test_damaged_metadata_is_left_out_not_a_traceback_or_500, LENIENT_METADATA, {}),
    "nan-vectors": (damage.test_a_nan_embedding_is_refused_on_open, NAN_VECTORS_PASS, {}),
    "all-400": (limits.test_a_full_disk_is_507_and_a_busy_store_503, ALL_400, {}),
    "no-header-deadline": (limits.test_idle_and_trickling_connections_are_closed, NO_HEADER_DEADLINE, {}),
    "no-file-depth-limit": (files.test_nested_json_in_model_files, NO_FILE_DEPTH_LIMIT, {"name": "config.json"}),
    "no-folder-rule": (files.test_compact_over_an_existing_folder, NO_FOLDER_RULE, {}),
    "text-compared": (rules.test_keyed_retries_compare_values, TEXT_COMPARED, {}),
    "any-token": (rules.test_blank_and_unsendable_tokens, ANY_TOKEN, {}),
    "one-label-calibrates": (rules.test_calibrate_on_a_single_label, ONE_LABEL_CALIBRATES, {}),
    "decision-fields-unchecked": (decisions.test_reserved_decision_fields, DECISION_FIELDS_UNCHECKED, {}),
    "judged-texts-ignored": (decisions.test_decisions_follow_the_texts_judged, JUDGED_TEXTS_IGNORED, {}),
    "cycles-allowed": (decisions.test_decisions_name_living_questions_without_cycles, CYCLES_ALLOWED, {}),
    "bare-cr-unquoted": (decisions.test_pair_files_round_trip, BARE_CR_UNQUOTED, {}),
    "decisions-trusted": (decisions.test_calibrate_on_untrustworthy_decisions, DECISIONS_TRUSTED, {}),
    "typed-filter-only": (filters.test_typed_filters_on_text_metadata, TYPED_FILTER_ONLY, {}),
    "nul-stored": (filters.test_nul_in_metadata_and_filters, NUL_STORED, {}),
    "control-in-filters": (filters.test_control_characters_in_a_milvus_filter, CONTROL_IN_FILTERS, {}),
    "work-not-marked": (dedup.test_a_work_folder_dupq_did_not_make, WORK_NOT_MARKED, {}),
    "output-over-input": (dedup.test_an_output_over_an_input, OUTPUT_OVER_INPUT, {}),
    "keys-guarded": (dedup.test_keys_round_trip, KEYS_GUARDED, {}),
    "vectors-by-position": (dedup.test_dedup_a_living_collection, VECTORS_BY_POSITION, {}),
    "stale-output-kept": (dedup.test_no_leftovers_of_a_refused_or_killed_run, STALE_OUTPUT_KEPT, {}),
    "cluster-unwatched": pytest.param(
        dedup.test_a_ray_cluster_that_dies_mid_run, CLUSTER_UNWATCHED, {}, marks=[pytest.mark.ray, pytest.mark.slow]
    ),
    "any-folder-replaced": (files.test_commands_that_write_a_folder, ANY_FOLDER_REPLACED, {}),
    "static-words-unchecked": (models.test_a_damaged_static_words_file, STATIC_WORDS_UNCHECKED, {"damage": "nested"}),
    "any-join-weight": (models.test_join_weights_out_of_range, ANY_JOIN_WEIGHT, {}),
    "joined-branch-ignored": (models.test_compact_no_branch_of_a_joined_model, JOINED_BRANCH_IGNORED, {}),
    "whitespace-words": (models.test_adapt_words_beyond_ascii, WHITESPACE_WORDS, {}),
    "key-one-segment": (api.test_keys_with_a_slash, KEY_ONE_SEGMENT, {}),
    "slash-redirects": (api.test_no_redirect_to_a_clients_host, SLASH_REDIRECTS, {}),
    "no-read-token": (api.test_a_read_token, NO_READ_TOKEN, {}),
    "empty-body-passes": (api.test_empty_bodies_are_422, EMPTY_BODY_PASSES, {}),
    "dead-series-kept": (api.test_a_killed_worker, DEAD_SERIES_KEPT, {}),
    "ping-waits": (api.test_a_worker_that_dies_during_a_health_check, PING_WAITS, {}),
    "inherited-metrics": (api.test_an_inherited_metrics_folder, INHERITED_METRICS, {}),
}


@pytest.mark.parametrize("test, mutation, params", CASES.values(), ids=list(CASES))
def test_a_fault_test_fails_on_the_fault_it_names(test, mutation, params, monkeypatch, tmp_path):
    run_broken(test, mutation, monkeypatch, tmp_path, **params)


def test_a_failing_commit_shows_as_a_second_store(monkeypatch, tmp_path):
    """The blind spot itself: without keys, an add that fails after its commit is stored twice, and the test says so."""
    test = service.test_concurrent_adds_after_a_failing_commit_are_stored_once
    failed = run_broken(test, FAILS_AFTER_COMMIT, monkeypatch, tmp_path)
    assert failed.match(r"[1-9]\d* stored twice; answers \[.*500")
