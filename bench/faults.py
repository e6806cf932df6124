"""The fault suite: every class of fault the hostile tests found, run against the installed package
in temporary folders, and one JSON line of figures.

    python bench/faults.py               # a few minutes on 2 cores; the bundled model, synthetic questions
    python bench/faults.py --only kill   # the cases whose name contains "kill"
    python bench/faults.py --list        # the cases' names and what each checks

The cases live in ``bench/fault_cases_*.py`` (service, collection, cli, training, input...), each
module a list ``CASES`` of functions; this runner collects them all. A case gets a fresh
temporary folder and returns a :class:`~faultkit.Result`: whether dupq behaved (``survived``), how
many acknowledged questions went missing (``data_lost``), whether a traceback reached a user
(``tracebacks``) and how many 500 answers the server gave (``server_500s``). A case that raises
did not survive. Add a case by writing a function in one of those modules and listing it in its
``CASES``; ``tests/test_fault_suite.py`` shows, for a few, that the case fails on the fault it names.

Output: ``{"cases": N, "survived": N, "data_lost": 0, "tracebacks": 0, "server_500s": 0, "results": {...}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from faultkit import (  # noqa: F401 -- re-exported: a case module may import these from the runner
    AUTH,
    DUPQ,
    ENV,
    TOPICS,
    Result,
    Server,
    build,
    dupq,
    free_port,
    http,
    refused,
    stored,
    synthetic,
)

BENCH = Path(__file__).resolve().parent


def collect() -> list:
    """Every case of every ``bench/fault_cases_*.py`` module, module by module in name order."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    cases, seen = [], {}
    for path in sorted(BENCH.glob("fault_cases_*.py")):
        for case in importlib.import_module(path.stem).CASES:
            if case.__name__ in seen:
                raise SystemExit(f"two fault cases are named {case.__name__} ({seen[case.__name__]}, {path.name})")
            seen[case.__name__] = path.name
            cases.append(case)
    return cases


def run(case) -> Result:
    # A case run in this process warns on stderr as dupq should (the full disk's "could not write"):
    # kept out of the output, which is the one JSON line, with its reasons in each case's result.
    with tempfile.TemporaryDirectory(prefix=f"dupq-{case.__name__}-") as tmp, contextlib.redirect_stderr(io.StringIO()):
        try:
            result = case(Path(tmp))
        except Exception:  # noqa: BLE001 -- a case that raises did not survive; say where
            result = Result(False, detail=traceback.format_exc(limit=-2).strip().splitlines()[-1])
    result.detail = result.detail.replace(tmp, "TMP")  # the output names no folder of this machine
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the cases and what each checks, run none")
    args = parser.parse_args()
    cases = [case for case in collect() if args.only in case.__name__]
    if args.list:
        for case in cases:
            print(f"{case.__name__}: {(case.__doc__ or '').strip().splitlines()[0]}")
        return
    import torch

    torch.set_num_threads(1)
    results = {}
    for case in cases:
        started = time.perf_counter()
        results[case.__name__] = {**asdict(run(case)), "seconds": round(time.perf_counter() - started, 1)}
    total = {
        key: sum(r[key] for r in results.values()) for key in ("survived", "data_lost", "tracebacks", "server_500s")
    }
    print(json.dumps({"cases": len(results), **total, "results": results}))


if __name__ == "__main__":
    main()
