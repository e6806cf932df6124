"""What only a Postgres collection has to show: writers in several processes, its failures as sentences, the
password kept out of sight, and serving from several workers. The shared backend suite (the ``location``
fixture of tests/collection/test_collection.py, tests/collection/test_live.py and others) runs on it as well.

Each test has a table of its own on the session's private server (pgserver, ``postgres_server``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from urllib.parse import quote

import numpy as np
import pytest
from collkit import ONE_THREAD, kill_9_when
from fastapi.testclient import TestClient

from dupq.collection.backend import check_where, matches
from dupq.collection.collection import Collection
from dupq.collection.postgres.address import parse
from dupq.collection.rows import StoreFailure
from dupq.core.errors import DupqError
from dupq.index.vectors import search as exact_search
from dupq.service.app import create_app
from support.errors import refused
from support.kit import cli
from support.private import postgres_connections
from support.serving import ServeProcess, http

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # platformdirs' note on XDG_RUNTIME_DIR
SECRET = "s3cret-Pw!"


def texts_of(n: int, offset: int = 0) -> list[str]:
    return [f"How do I fix error {i} in the help desk app?" for i in range(offset, offset + n)]


def with_password(location: str) -> str:
    return location.replace("postgresql://postgres@", f"postgresql://postgres:{quote(SECRET, safe='')}@")


def run_sql(server: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def test_the_location_and_its_password(postgres):
    where = parse("postgresql://app:pw%40x@db.example:6543/desk?table=faq&sslmode=require")
    assert (where.table, where.password) == ("faq", "pw@x")
    assert where.text == "postgresql://app:***@db.example:6543/desk?table=faq&sslmode=require"
    assert "table" not in where.conninfo and "sslmode=require" in where.conninfo and "pw%40x" in where.conninfo
    assert "pw" not in repr(where)
    for bad, said in [
        ("postgresql://app:pw@db/desk?table=1x", "table name"),
        ("postgresql://app:pw@db:99999/desk", "not a valid address"),
        ("postgresql://app:pw@db", "names no database"),
    ]:
        with pytest.raises(DupqError, match=said) as e:
            parse(bad)
        assert "pw" not in str(e.value)


def test_the_password_is_never_shown(postgres, tiny_model, tiny_model_dir, tmp_path):
    """Trust authentication takes any password: this one reaches every message, page and log line there is."""
    location = with_password(postgres)
    texts = texts_of(30)
    with Collection.build(location, texts, tiny_model, keys=[f"k{i}" for i in range(30)]) as coll:
        assert SECRET not in str(coll.location) and "***" in str(coll.location)
        assert SECRET not in repr(coll.location) and SECRET not in json.dumps(coll.manifest)
    outputs = [
        cli("search", location, texts[3], "-k", "2"),
        cli("index", "remove", location, "nope"),
        cli("index", "update", location, "k1", "--metadata", '{"a": 1}'),
        cli("search", location.replace("&table=", "&table=missing_"), "How?"),
    ]
    assert [r.exit_code for r in outputs] == [0, 2, 0, 2], [r.output for r in outputs]
    with TestClient(create_app(location, token="t")) as client:
        pages = [client.get(path).text for path in ("/health", "/metrics", "/")]
    assert all(
        SECRET not in text and quote(SECRET, safe="") not in text for text in [o.output for o in outputs] + pages
    )


@pytest.fixture
def scram_user(postgres_server, tmp_path):
    """A role ``desk`` that logs in with the password SECRET (the server trusts everyone else), and a database
    ``desk`` it owns, where it may not create the pgvector extension (only a superuser may)."""
    from pgserver.postgres_server import PostgresServer

    (server,) = PostgresServer._instances.values()  # the session's one server
    hba = server.pgdata / "pg_hba.conf"
    if "desk" not in hba.read_text():
        hba.write_text("local all desk scram-sha-256\n" + hba.read_text())
        run_sql(
            postgres_server,
            f"CREATE ROLE desk LOGIN PASSWORD '{SECRET}'",
            "CREATE DATABASE desk OWNER desk",
            "SELECT pg_reload_conf()",
        )
    import psycopg

    desk = postgres_server.replace("/postgres?", "/desk?").replace("postgresql://postgres@", "postgresql://desk@")
    for _ in range(600):  # the server reads pg_hba.conf again soon after pg_reload_conf(), not at once
        try:
            psycopg.connect(desk).close()
        except psycopg.OperationalError:
            return desk
        time.sleep(0.1)
    pytest.fail("the server did not start asking desk for its password")


def test_a_wrong_password_a_missing_extension_and_a_stranger_s_table_are_one_sentence_each(
    postgres, scram_user, tiny_model, monkeypatch
):
    wrong = scram_user.replace("//desk@", f"//desk:{quote('not-the-' + SECRET, safe='')}@") + "&table=faq"
    said = cli("search", wrong, "How?")
    assert "password is wrong" in refused(said) and SECRET not in said.output
    monkeypatch.setenv("PGPASSWORD", SECRET)  # libpq's own way: the password is in no location at all
    with pytest.raises(DupqError, match="lacks the pgvector extension and it cannot be created") as e:
        Collection.build(scram_user + "&table=faq", texts_of(5), tiny_model)
    assert SECRET not in str(e.value)
    refused(cli("search", scram_user + "&table=faq", "How?"), "lacks the pgvector extension")

    server, table = postgres.rsplit("&table=", 1)
    run_sql(server, f"CREATE TABLE {table} (id int, body text)")
    refused(cli("search", postgres, "How?"), "was not made by dupq")
    with pytest.raises(DupqError, match="already holds a table"):
        Collection.build(postgres, texts_of(5), tiny_model)


def test_a_server_gone_is_unreachable_with_retry_after(postgres, tiny_model):
    server = postgres.rsplit("&table=", 1)[0]
    Collection.build(postgres, texts_of(20), tiny_model, metadata=[{"n": i} for i in range(20)]).close()
    with Collection.open(postgres, tiny_model) as coll:
        coll.search(["How?"])
        run_sql(server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
        assert len(coll.search(["How?"], k=3)[0]) == 3  # a dropped connection: a read tries once more, anew
        with TestClient(create_app(coll, token="t")) as client:
            address = postgres_connections(coll).where
            gone = address.__class__(
                address.conninfo.replace("host=", "port=1&host="), address.table, address.text, address.password
            )
            postgres_connections(coll).where = gone  # as if the server had gone away: new connections fail
            run_sql(server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
            answer = client.post("/search", json={"question": "How?", "k": 3})
            assert answer.status_code == 503 and "Retry-After" in answer.headers, answer.text
            with pytest.raises(StoreFailure, match="unreachable") as e:
                coll.search(["How?"])
            assert e.value.reason == "unreachable"
            postgres_connections(coll).where = address
    refused(cli("search", "postgresql://postgres@127.0.0.1:1/postgres?table=x", "How?"), "unreachable")


def test_filters_follow_the_one_rule_exactly_on_hnsw(postgres, tiny_model):
    """Wide filters walk the graph, narrow ones scan the matching rows; both keep the k best that match, and
    ``true`` matches 1 as the rule (Python's ``==``) says."""
    n = 600
    texts = texts_of(n)
    meta = [{"group": i % 100, "flag": bool(i % 2), "code": f"c{i % 7}"} for i in range(n)]
    with Collection.build(postgres, texts, tiny_model, metadata=meta, index="hnsw") as coll:
        vectors = coll.stored_vectors()  # (n, d) in id order: ids 0..n-1
        queries = vectors[[3, 50, 401]]
        for where in [
            {"group": list(range(60))},
            {"group": 7},
            {"flag": 1},
            {"flag": True, "code": ["c1", "c2"]},
            {"code": "c"},
            {"group": 1.0},
        ]:
            kept = np.array([matches(m, check_where(where)) for m in meta])
            scores, ids = coll.nearest(queries, 10, where=where)
            want, _ = exact_search(queries, vectors[kept], 10) if kept.any() else (np.zeros((3, 0)), None)
            assert np.isin(ids[ids >= 0], np.flatnonzero(kept)).all(), where
            assert (ids >= 0).sum(1).tolist() == [min(10, int(kept.sum()))] * 3, where
            np.testing.assert_allclose(np.where(ids >= 0, scores, 0)[:, : want.shape[1]], want, atol=1e-4)


ADDER = """
import sys
from dupq.collection.collection import Collection
from dupq.modeling.model import Model
location, model, first, last, step = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
with Collection.open(location, Model.load(model)) as coll:
    for lo in range(first, last, step):
        keys = [f"k{i}" for i in range(lo, lo + step)]
        coll.add([f"How do I fix error {i} in the help desk app?" for i in range(lo, lo + step)], keys=keys)
        print(lo + step, flush=True)
"""


def adder(location, model_dir, first, last, step=10) -> list[str]:
    """The command of a process adding keys ``k{first}`` to ``k{last}``, ``step`` at a time, printing each count."""
    return [sys.executable, "-c", ADDER, location, str(model_dir), str(first), str(last), str(step)]


@pytest.mark.slow
def test_two_writers_and_a_killed_one_store_each_key_once(postgres, tiny_model, tiny_model_dir):
    Collection.build(postgres, texts_of(10, 10_000), tiny_model, index="hnsw").close()
    both = [  # 150 keys in common
        subprocess.Popen(adder(postgres, tiny_model_dir, *keys), stdout=subprocess.DEVNULL, env=ONE_THREAD)
        for keys in ((0, 300), (150, 450))
    ]
    assert [proc.wait(120) for proc in both] == [0, 0]
    acknowledged = int(kill_9_when(adder(postgres, tiny_model_dir, 450, 2_000), lambda line: int(line) >= 550)[-1])
    with Collection.open(postgres, tiny_model) as coll:
        keys = [key for _, key, _, _ in coll.stored_rows() if key is not None]
        assert len(keys) == len(set(keys))  # none twice
        assert {f"k{i}" for i in range(acknowledged)} <= set(keys)  # every acknowledged add is there
        assert set(keys) <= {f"k{i}" for i in range(acknowledged + 10)}  # at most the batch under way, whole
        again = coll.add(texts_of(acknowledged + 10), keys=[f"k{i}" for i in range(acknowledged + 10)])  # a retry
        assert len(coll) == 10 + acknowledged + 10 and len(set(again)) == acknowledged + 10


@pytest.mark.slow
def test_serve_with_two_workers_and_dedup_from_the_table(postgres, tiny_model, tmp_path):
    texts = texts_of(40) + ["How can I reset my password?", "How do I reset my password?"]
    keys = [f"k{i}" for i in range(len(texts))]
    Collection.build(postgres, texts, tiny_model, keys=keys).close()
    env = {**os.environ, "DUPQ_API_TOKEN": "tok"}
    with ServeProcess(postgres, "--workers", "2", env=env) as server:
        auth = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
        for i in range(6):  # spread over both workers by the kernel
            body = json.dumps({"text": f"Why does the export {i} fail?", "key": f"new{i}"}).encode()
            assert http(server.url + "/questions", body, headers=auth).status in (200, 201)
        with Collection.open(postgres, tiny_model) as coll:
            assert len(coll) == len(texts) + 6  # every worker's adds, in the one table
        assert SECRET not in server.stderr()
    out = tmp_path / "groups.csv"
    said = cli("dedup", postgres, "--out", out)
    assert said.exit_code == 0, said.output
    assert out.read_text().count("\n") >= 2
