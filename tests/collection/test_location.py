"""A Postgres location without the postgres extra is refused in one sentence naming the extra, not a traceback."""

from __future__ import annotations

import subprocess
import sys

from support.errors import refused


def test_a_postgres_location_without_its_extra_is_one_sentence(tmp_path):
    (tmp_path / "q.txt").write_text("How do I reset my password?\nWhere is my invoice?\n")
    blocked = (
        "import sys; sys.modules['psycopg'] = None\n"  # an import of it fails, as when the extra is not installed
        "from dupq.cli import main; main()"
    )
    args = ["index", "build", str(tmp_path / "q.txt"), "--out", "postgresql://localhost/desk"]
    done = subprocess.run([sys.executable, "-c", blocked, *args], capture_output=True, text=True, timeout=120)
    line = refused(done)
    assert (
        line
        == 'error: a postgres collection needs psycopg, which is not installed; install it with `pip install -e ".[postgres]"`.'
    )
