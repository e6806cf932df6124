"""Fuzz the API from its own OpenAPI schema with schemathesis: no 500, answers match the schema.

Schemathesis generates valid and invalid bodies for every operation (hypothesis underneath),
sends them through the ASGI app (with the write token) and runs its default checks: no server
error, status codes and bodies as documented, valid data accepted, invalid data refused. The
number of examples is bounded so the file runs in seconds.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from servicekit import build_collection, questions

TOKEN = "fuzz-token"


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory, tiny_model_dir, small_splits):
    from dupq.service import create_app

    folder = build_collection(tmp_path_factory.mktemp("fuzz") / "coll", tiny_model_dir, questions(small_splits, 200))
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(folder, token=TOKEN))


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_server_errors(api_schema, mode):
    @given(case=api_schema.as_strategy(mode))
    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def fuzz(case):
        case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})

    fuzz()
