"""dupq-lab pg-two-servers: two `dupq serve` on one Postgres table, each killed once (the store's own tests:
tests/collection/test_postgres.py)."""

from __future__ import annotations

import os

import pytest

from dupq.collection.collection import Collection
from dupq_lab.service.pg_two_servers import STARTUP_S, TOKEN, measure
from support.serving import ServeProcess

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # platformdirs' note on XDG_RUNTIME_DIR


def texts_of(n: int, offset: int = 0) -> list[str]:
    return [f"How do I fix error {i} in the help desk app?" for i in range(offset, offset + n)]


@pytest.mark.slow
def test_two_servers_each_killed_once_lose_no_add_and_store_none_twice(postgres, tiny_model):
    Collection.build(postgres, texts_of(10, 10_000), tiny_model, keys=[f"seed{i}" for i in range(10)]).close()
    env = {**os.environ, "DUPQ_API_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    figures = measure(postgres, lambda: ServeProcess(postgres, "--workers", "2", env=env, startup=STARTUP_S), adds=500)
    assert (figures["acknowledged"], figures["stored"], figures["lost"], figures["twice"]) == (500, 500, 0, 0), figures
    assert len(figures["restarts"]) == 2
    for change in ("remove", "update"):  # answered, and no search of either server's workers showed the old question
        assert (figures[change]["status"], figures[change]["stale"]) == (200, 0), figures
