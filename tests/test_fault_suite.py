"""The fault suite (bench/faults.py) can fail: cases run against a deliberately broken dupq report the fault.

A case that cannot fail proves nothing: ``nan_in_json_output`` once let NaN stay a string that
never reached the check, and ``adds_after_a_failing_commit`` retried with keys, so a second
store could not happen. Here each representative case runs once with a **mutation**, a small
change that puts back the fault the case names (NaN allowed in metadata and JSON output, an
add that fails after its commit, no nesting limit, no headers on a bug's 500, ...), and must
not survive; the two cases that were blind also run unmutated and survive.

A mutation is Python run in this process (``patch`` is ``monkeypatch.setattr``) and, through
``faultkit.DUPQ``, in every ``dupq`` process the case starts (``patch`` is ``setattr`` there).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import faultkit  # noqa: E402 -- bench/ is not a package: on the path just above
import faults  # noqa: E402

CASES = {case.__name__: case for case in faults.collect()}


def broken(monkeypatch, tmp_path: Path, mutation: str) -> None:
    """Apply ``mutation`` here and in every ``dupq`` command the cases run."""
    exec(mutation, {"patch": monkeypatch.setattr})
    (tmp_path / "fault_mutation.py").write_text("patch = setattr\n" + mutation)
    # Every Python process on the path imports sitecustomize at start: the workers `dupq serve` spawns too.
    (tmp_path / "sitecustomize.py").write_text("import fault_mutation  # noqa: F401\n")
    command = [sys.executable, "-c", "import fault_mutation\nfrom dupq.cli import main\nmain()"]
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setattr(faultkit, "DUPQ", command)
    monkeypatch.setattr(faultkit, "ENV", {**faultkit.ENV, "PYTHONPATH": path})


NAN_STORED = """
import json
import dupq.search.collection as collection
import dupq.core.files as files
import dupq.cli.index as index

def lenient(metadata, n):  # NaN allowed into the store, as before the check
    return [json.dumps(m) if m else None for m in (metadata or [None] * n)]

patch(collection, "check_metadata", lenient)
patch(files, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
patch(index, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
"""

NAN_READ = """
import json
import dupq.search.collection as collection
import dupq.core.files as files
import dupq.cli.index as index

patch(collection, "read_metadata", lambda text: (json.loads(text) if text else {}, None))
patch(files, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
patch(index, "to_json", lambda obj, **kwargs: json.dumps(obj, **kwargs))
"""

FAILS_AFTER_COMMIT = """
from dupq.search.collection import Collection

stored = Collection.add

def add(self, texts, metadata=None, keys=None):  # the rows are committed, then the add fails anyway
    stored(self, texts, metadata, keys)
    raise RuntimeError("the cache could not be written")

patch(Collection, "add", add)
"""

NO_DEPTH_LIMIT = """
import dupq.search.rows as rows
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
import dupq.search.collection as collection

patch(collection, "read_metadata", lambda text: (json.loads(text) if text else {}, None))
"""

NAN_VECTORS_PASS = """
import dupq.search.store as store

patch(store, "_check_finite", lambda *args, **kwargs: None)
"""

ALL_400 = """
import dupq.service.app as app

patch(app, "answer_to", lambda e: (400, str(e), {}))
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
import dupq.search.store as store

patch(store, "same_metadata", lambda a, b: a == b)
"""

ANY_TOKEN = """
import os
import dupq.service.app as app

patch(app, "write_token", lambda token=None: token if token is not None else os.environ.get(app.TOKEN_ENV) or None)
"""

ONE_LABEL_CALIBRATES = """
import dupq.evaluation.evaluate as evaluate

patch(evaluate, "check_dev_labels", lambda labels: None)
"""


@pytest.mark.parametrize(
    "case, mutation",
    [
        ("nan_in_json_output", NAN_STORED),
        ("nan_in_json_output", NAN_READ),
        ("adds_after_a_failing_commit", FAILS_AFTER_COMMIT),
        ("deeply_nested_bodies", NO_DEPTH_LIMIT),
        ("security_headers_everywhere", BARE_500),
        ("damaged_metadata_rows", LENIENT_METADATA),
        ("nan_embedding_on_open", NAN_VECTORS_PASS),
        ("server_side_failures_are_5xx", ALL_400),
        ("idle_and_trickling_connections", NO_HEADER_DEADLINE),
        ("nested_json_in_model_files", NO_FILE_DEPTH_LIMIT),
        ("export_over_an_existing_folder", NO_FOLDER_RULE),
        ("keyed_retries_compare_values", TEXT_COMPARED),
        ("blank_and_unsendable_tokens", ANY_TOKEN),
        ("calibrate_on_a_single_label", ONE_LABEL_CALIBRATES),
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
    ],
)
def test_a_case_reports_the_fault_it_names(case, mutation, monkeypatch, tmp_path, one_torch_thread):
    broken(monkeypatch, tmp_path, mutation)
    result = faults.run(CASES[case])
    assert not result.survived, f"{case} survived its fault: {result.detail}"


def test_a_failing_commit_shows_as_a_second_store(monkeypatch, tmp_path, one_torch_thread):
    """The blind spot itself: without keys, an add that fails after its commit is stored twice, and the case says so."""
    broken(monkeypatch, tmp_path, FAILS_AFTER_COMMIT)
    result = faults.run(CASES["adds_after_a_failing_commit"])
    twice = int(result.detail.split(" stored twice")[0])
    assert twice >= 1 and result.server_500s >= 1


@pytest.mark.parametrize("case", ["nan_in_json_output", "adds_after_a_failing_commit"])
def test_the_cases_once_blind_survive_the_fixed_code(case, one_torch_thread):
    result = faults.run(CASES[case])
    assert result.survived, result.detail
