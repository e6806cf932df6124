"""``dupq-lab``: every measurement is a command whose options parse, and the figures' renderer fills what it finds."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dupq_lab.cli import COMMANDS, app
from dupq_lab.figures import cell


def test_the_lab_lists_every_measurement():
    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and all(name in listed.output for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_imports_and_declares_its_options(name):
    shown = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and f"Usage: dupq-lab {name}" in shown.output, shown.output


def test_a_cell_is_a_dash_where_its_input_or_key_is_missing():
    data = {"r": {"dupq": {"mrr@10": 0.71234, "ece": 0.0070}}, "none": None}
    assert cell("{r[dupq][mrr@10]:.3f} / {r[dupq][ece]:.4f~}", data) == "0.712 / 0.007"
    assert [cell(t, data) for t in ("{r[bm25][mrr@10]:.3f}", "{none[x]}", "{gone}")] == ["-", "-", "-"]


def test_the_digest_cache_encodes_each_text_once_and_keeps_it_for_the_next_run(tmp_path):
    import numpy as np

    from dupq_lab.vector_cache import DigestCache, cached

    def vectors(texts):
        return np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)

    class Counting:
        out_dim, seen = 3, []

        def encode(self, texts, batch_size=None):
            self.seen.extend(texts)
            return vectors(texts)

    model = Counting()
    with cached(model, tmp_path) as cache:
        first = model.encode(["a", "bb", "a", "ccc"])
        again = model.encode(["ccc", "dddd"])
    assert model.seen == ["a", "bb", "ccc", "dddd"] and cache.encoded == 4
    np.testing.assert_array_equal(first, vectors(["a", "bb", "a", "ccc"]))
    np.testing.assert_array_equal(again[0], first[3])
    assert "encode" not in vars(model)  # the model encodes by itself again after the block
    reopened = DigestCache(model, tmp_path)  # a later run reads what was written
    np.testing.assert_array_equal(reopened(["bb", "dddd"]), vectors(["bb", "dddd"]))
    assert reopened.encoded == 0 and len(model.seen) == 4


def test_the_harness_times_each_call_and_reads_its_latencies_as_numpy_does():
    import numpy as np

    from dupq_lab.options import clocked, latency_ms, timed

    returned, seconds = timed(lambda x: x * 2, [1, 2, 3])
    assert returned == [2, 4, 6] and len(seconds) == 3 and all(s >= 0 for s in seconds)
    returned, second = clocked(lambda x, y=0: x + y, 2, y=3)
    assert returned == 5 and second >= 0
    seconds = [0.001, 0.002, 0.010, 0.0005]
    naive = {f"p{q}_ms": round(float(np.percentile(seconds, q)) * 1000, 3) for q in (50, 99)}
    assert latency_ms(seconds) == naive == {"p50_ms": 1.5, "p99_ms": 9.76}


def test_a_child_process_gives_its_last_json_line_or_says_how_it_failed():
    import sys

    from dupq_lab.options import child, last_json

    printed = "print('progress'); print('{\"rate\": 2}')"
    assert last_json(child([sys.executable, "-c", printed], "the child")) == {"rate": 2}
    with pytest.raises(SystemExit, match="(?s)^the child failed: .*ZeroDivisionError"):
        child([sys.executable, "-c", "1 / 0"], "the child")


def test_a_command_says_one_sentence_for_a_bad_model_folder(tmp_path):
    import subprocess
    import sys

    from support.errors import refused

    absent = str(tmp_path / "absent")
    done = subprocess.run(
        [sys.executable, "-m", "dupq_lab", "retrieval", "--model", absent], capture_output=True, text=True, timeout=300
    )
    refused(done)
    assert done.stdout == ""
