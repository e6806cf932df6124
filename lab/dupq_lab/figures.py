"""Every Markdown table of README.md and docs/: one declaration each (:data:`TABLES`), one renderer (:func:`render`).

A page asks for a table by name, ``<!-- regenerate: table NAME -->`` (``dupq-lab figures`` writes it). A
:class:`Table` names its inputs in docs/results/ (:func:`source`) and holds its header and rows as
Markdown rows of templates (`` | `` between cells): Python format strings over those inputs, ``{name[key][key]:spec}``, where the spec ``.4f~``
drops trailing zeros and ``bytes`` writes a size in MB, GB or TB. A cell whose input or key is
missing is ``-``, and a row whose every cell but its labels is ``-`` is left out. ``each`` repeats the
rows once per item of an input (the item is ``it``, its key ``key``). A table that is arithmetic
rather than lookups (a pivot, a plan) is a small function referenced from its entry. Nothing is
measured here.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field

from dupq_lab.options import RESULTS


def saved(name: str) -> list[dict]:
    """A saved measurement, docs/results/NAME: ``[{"command": ..., "output": [line, ...]}, ...]``."""
    return json.loads((RESULTS / name).read_text())


def printed(entry: dict) -> dict:
    """The JSON line a saved command printed last (a row on stderr after it is skipped)."""
    return json.loads(next(line for line in reversed(entry["output"]) if line.startswith("{")))


def json_lines(name: str, start: str = "{") -> list[dict]:
    """Every line starting with ``start`` that the saved commands of docs/results/NAME printed, read as JSON, in order."""
    return [json.loads(line) for entry in saved(name) for line in entry["output"] if line.startswith(start)]


def source(spec: str):
    """One input: ``FILE`` (the JSON its last command printed), ``FILE | COMMAND`` (that command, else the first starting so),
    ``FILE *`` (every command's), ``*.jsonl`` (the sweeps' rows, by name); None where FILE is missing."""
    if spec == "*.jsonl":
        lines = (line for path in sorted(RESULTS.glob("*.jsonl")) for line in path.read_text().splitlines())
        return {row["name"]: row for line in lines if line.strip() for row in [json.loads(line)]}
    name, _, command = (part.strip() for part in spec.partition("|"))
    name, every = name.removesuffix(" *"), name.endswith(" *")
    if not (RESULTS / name).is_file():
        return None
    entries = saved(name)
    if every:
        return [printed(e) for e in entries]
    exact = [e for e in entries if e["command"] == command] or [e for e in entries if e["command"].startswith(command)]
    return printed(exact[0] if command else entries[-1])


def human(n_bytes: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= size:
            return f"{n_bytes / size:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


class _Cells(string.Formatter):
    def format_field(self, value, spec: str) -> str:
        if value is None:
            raise KeyError("null")
        if spec == "bytes":
            return human(value)
        if spec.endswith("~"):
            return format(value, spec[:-1]).rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
        return format(value, spec)


def cell(template: str, data: dict) -> str:
    """``template`` filled from ``data``; ``-`` where an input or a key is missing."""
    try:
        return _Cells().vformat(template, (), data)
    except (KeyError, IndexError, TypeError):
        return "-"


@dataclass(frozen=True)
class Table:
    header: str = ""  # the column labels, in order, " | " between them (templates too)
    rows: tuple[str, ...] = ()  # each row's cells, " | " between them, the first its label
    data: dict[str, str | Callable] = field(default_factory=dict)  # name -> source() spec, or a function of none
    each: str = ""  # the rows again for every item of this input (``it``; ``key`` where it is a dict)
    labels: int = 1  # the cells that name a row; a row whose other cells are all "-" is left out
    render: Callable[[], list[list[str]]] | None = None  # a table of arithmetic: its header and rows, by itself


def markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return [line(header), line(["---"] * len(header)), *map(line, rows)]


def render(name: str) -> list[str]:
    """The Markdown lines of table ``name``."""
    table = TABLES[name]
    if table.render:
        header, *rows = table.render()
        return markdown(header, rows)
    data = {key: spec() if callable(spec) else source(spec) for key, spec in table.data.items()}
    items = data[table.each] if table.each else [None]
    items = items.items() if isinstance(items, dict) else enumerate(items)
    rows = [
        [cell(c, {**data, "it": it, "key": key}) for c in row.split(" | ")] for key, it in items for row in table.rows
    ]
    kept = [r for r in rows if any(c != "-" for c in r[table.labels :])]
    return markdown([cell(h, data) for h in table.header.split(" | ")], kept)


# -- the tables that are arithmetic ---------------------------------------------------------------------------


def adapt() -> list[list[str]]:
    """The saved `dupq adapt` run: what its printed lines say, and the help-desk dev Recall@1 before and after."""
    text = "\n".join(saved("adapt.json")[-1]["output"])
    questions = re.search(r"adapting the .* to ([\d,]+) questions", text).group(1)
    teacher, tuning = re.search(r"\(teacher (\d+)s, fine-tuning (\d+)s\)", text).groups()
    before, after = re.search(r"cosine to the teacher on your .*: ([\d.]+) before, ([\d.]+) after", text).groups()
    recall = [source(f"out_of_domain_{s}_dev.json")["dupq"]["recall@1"] for s in ("branch", "adapted_branch")]
    header = ["questions", "teacher", "fine-tuning", "cosine to the teacher", "help-desk dev Recall@1"]
    row = [questions, f"{teacher} s", f"{tuning} s", f"{before} -> {after}", "{:.3f} -> {:.3f}".format(*recall)]
    return [header, row]


def error_codes() -> list[list[str]]:
    """docs/collections.md: the saved dupq-lab error-codes run: Recall@1 of each search, without and with each
    exact-code rule, on the queries that name a code and on all queries, per half (the rule chosen on dev marked)."""
    r = source("error_codes.json")
    q = r["queries"]
    halves = [(f"{h}: {q[h]['with_code']} with a code", f"{h}: all {q[h]['all']}") for h in ("dev", "test")]
    header = ["search", "exact-code rule", *(label for pair in halves for label in pair)]
    rows = []
    for name in r["recall@1"]["dev"]:
        search, rule = name.split(" | ")
        label = f"{rule} (chosen on dev)" if rule != "none" and r["chosen"][search] == rule else rule
        cells = [f"{r['recall@1'][h][name][m]:.3f}" for h in ("dev", "test") for m in ("codes", "all")]
        rows.append([search, label, *cells])
    return [header, *rows]


RERANKERS = {"minilm": "all-MiniLM-L6-v2", "mpnet": "all-mpnet-base-v2"}  # a named reranker -> its model's name
RERANK_K_RUNS = {"minilm": "rerank_k.json", "mpnet": "rerank_k_mpnet.json"}  # the saved dupq-lab rerank-k runs


def rerank_run(reranker: str, split: str, name: str | None = None, now: bool = False) -> dict | None:
    """The saved ``dupq-lab rerank-k`` (or, with ``name``, another command's) run of ``reranker`` on ``split``: the
    lazy one, or with ``now`` the one with ``--rerank-now``."""
    name = name or RERANK_K_RUNS[reranker]
    command = f"dupq-lab {'rerank-k' if name in RERANK_K_RUNS.values() else 'rerank-retrieval'} --rerank {reranker} --split {split}"
    if not (RESULTS / name).is_file():
        return None
    found = [e for e in saved(name) if e["command"].startswith(command) and ("--rerank-now" in e["command"]) == now]
    return printed(found[0]) if found else None


def rerank_k(reranker: str = "minilm") -> list[list[str]]:
    """docs/collections.md: a saved dupq-lab rerank-k run on dev: the model alone, then each K (the chosen one
    marked), then the test half at the chosen K."""
    r = rerank_run(reranker, "dev") or {"per_k": {}}
    chosen = str(r.get("chosen"))
    header = ["candidates (K)", "Recall@1", "MRR@10", "old question among the K", "first search: reranker encodes"]

    def row(label: str, it: dict, fast: dict | None = None, encodes: str = "-") -> list[str]:
        measure = lambda m: f"{fast[m]:.3f} -> {it[m]:.3f}" if fast else f"{it[m]:.3f}"  # noqa: E731
        cells = [measure("recall@1"), measure("mrr@10"), f"{it['candidate_recall']:.3f}", encodes]
        return [label, *cells, f"{it['stored_search_ms_p50']:.1f} ms"]

    fast = r.get("fast")
    rows = [["the model alone", f"{fast['recall@1']:.3f}", f"{fast['mrr@10']:.3f}", "-", "-", "-"]] if fast else []
    for k, it in r["per_k"].items():
        encodes = it["first_search_encodes"]
        about = f"{encodes} (about {encodes * r['reranker_ms_per_question']:.0f} ms)"
        rows.append(row(f"{k} (the default)" if int(k) == r["chosen"] else k, it, encodes=about))
    for now, how in ((False, ""), (True, ", every vector stored (`--rerank-now`)")):
        now_dev = rerank_run(reranker, "dev", now=True) if now else None
        if now_dev is not None and chosen in now_dev["per_k"]:
            rows.append(row(f"dev half, K = {chosen}{how}", now_dev["per_k"][chosen]))
        test = rerank_run(reranker, "test", now=now)
        if test is not None and chosen in test["per_k"]:  # reported on test, once K is chosen on dev
            label = f"test half: the model alone, then K = {chosen}{how}"
            rows.append(row(label, test["per_k"][chosen], test["fast"]))
    return [[*header, "search p50, vectors stored"], *rows]


def rerank_retrieval() -> list[list[str]]:
    """docs/collections.md: the saved dupq-lab rerank-retrieval runs: per reranker, the model alone and the reranker
    alone, each K on Quora's dev rows (the chosen one marked), then the test and dev rows at the chosen K."""
    header = ["reranker", "Quora rows", "candidates (K)", "MRR@10", "nDCG@10", "Recall@10", "a duplicate among the K"]
    measures = lambda m: [f"{m['mrr@10']:.4f}", f"{m['ndcg@10']:.4f}", f"{m['recall@10']:.4f}"]  # noqa: E731
    rows = []
    for reranker, title in RERANKERS.items():
        for split, rows_of in (("dev", "dev"), ("test", "test + dev")):
            r = rerank_run(reranker, split, "rerank_retrieval.json")
            dev = rerank_run(reranker, "dev", "rerank_retrieval.json")
            if r is None or dev is None:
                continue
            rows.append([title, rows_of, "the model alone", *measures(r["fast"]), "-"])
            if "alone" in r:
                rows.append([title, rows_of, f"{title} alone", *measures(r["alone"]), "-"])
            for k, it in r["per_k"].items():
                label = f"{k} (chosen on dev)" if int(k) == dev["chosen"] else k
                rows.append([title, rows_of, label, *measures(it), f"{it['candidate_recall']:.4f}"])
    return [header, *rows]


def rerank_weights() -> list[list[str]]:
    """docs/collections.md: the saved dupq-lab rerank-retrieval --weights runs (dev halves only): each reranker's
    primary measure on each yardstick as the model's cosine is weighted in."""
    runs = [printed(e) for e in saved("rerank_weights.json")]
    weights = ["0", *next(iter(runs[0]["per_k"].values()))["weighted"]] if runs else []
    header = ["reranker", "yardstick, dev half", "K", *(f"w = {w}" for w in weights)]
    rows = []
    for r in runs:
        ((k, it),) = r["per_k"].items()
        measure = "recall@1" if r["task"] == "help-desks" else "mrr@10"
        cells = [it[measure], *(m[measure] for m in it["weighted"].values())]
        task = "help desks: Recall@1" if r["task"] == "help-desks" else "Quora rows: MRR@10"
        rows.append([RERANKERS[r["rerank"]], task, k, *(f"{c:.4f}" for c in cells)])
    return [header, *rows]


def reranked_tiers(bundled: dict) -> list[tuple[str, dict]]:
    """The choice table's reranked tiers: the bundled model's top K (chosen on dev) ordered by each named reranker,
    on the help desks' and Quora's test halves (the saved dupq-lab rerank-k and rerank-retrieval runs); it builds at
    the ``bundled`` tier's speed, and a first search encodes K questions with the reranker."""
    out, speed = [], {"questions_per_s": bundled["questions_per_s"]}
    for reranker, title in RERANKERS.items():
        desk, desk_dev = rerank_run(reranker, "test"), rerank_run(reranker, "dev")
        if desk is None or desk_dev is None or str(desk_dev["chosen"]) not in desk["per_k"]:
            continue
        k = desk_dev["chosen"]
        quora = rerank_run(reranker, "test", "rerank_retrieval.json")
        quora_dev = rerank_run(reranker, "dev", "rerank_retrieval.json")
        chosen = str(quora_dev["chosen"]) if quora_dev else None
        first = k * desk_dev["reranker_ms_per_question"] / 1000
        now = rerank_run(reranker, "test", now=True)
        quora_now = rerank_run(reranker, "test", "rerank_retrieval.json", now=True)
        at_k = lambda run, chosen=chosen: run["per_k"].get(chosen) if run else None  # noqa: E731 - at Quora dev's K
        lazy = f"its top {k} reranked by {title} (`--rerank {reranker}`)"
        stored = f"reranked by {title}, every vector stored (`--rerank {reranker} --rerank-now`)"
        # every vector stored, a search's top 10 are the reranker's own top 10: the reranker alone's figure
        quora_stored = at_k(quora_now) if quora_now else (quora or {}).get("alone")
        ways = (
            (lazy, desk, at_k(quora), f"a first search +{first:.1f} s"),
            (stored, now, quora_stored, "+ the reranker's encoding of every question"),
        )
        for label, desk_run, quora_k, build in ways:
            if desk_run is not None and str(k) in desk_run["per_k"]:
                row = {"help_desk": desk_run["per_k"][str(k)], "quora": quora_k, **speed}
                out.append((f"dupq bundled, {label}", {**row, "build": f"{bundled['build_20k_s']:,.1f} s; {build}"}))
    return out


def small_desk() -> list[list[str]]:
    """docs/experiments/10: the saved dupq-lab small-desk runs (dev, then test): Recall@1 of each model, by split."""
    runs = {
        (row["mix"], e["command"].rsplit(" ", 1)[-1]): row
        for e in saved("small_desk.json")
        for row in (json.loads(line) for line in e["output"] if line.startswith("{"))
    }
    names = {"before": "before adapting (the bundled model)", 0: "dupq adapt --mix 0 (the desk alone)"}
    header = ["model", "the desk alone, dev: Recall@1", "test", "among 19,862 Quora questions, dev", "test"]
    rows = [
        [names[mix] if mix in names else f"dupq adapt (the default: Quora mixed in up to {mix:,})"]
        + [f"{runs.get((mix, split), {}).get(t, {}).get('recall@1', float('nan')):.3f}" for t in ("desk", "with_distractors") for split in ("dev", "test")]
        for mix in dict.fromkeys(m for m, _ in runs)
    ]  # fmt: skip
    return [header, *rows]


def branch(name: str) -> list[list[str]]:
    """docs/experiments/10: each system of every saved dupq-lab static-branch run in ``name``, in the runs' order."""
    header = ["model", "system", "help desks: Recall@1", "MRR@10", "Quora rows: MRR@10"]
    rows = [
        [run["model"], system, f"{r['help_desk']['recall@1']:.4f}", f"{r['help_desk']['mrr@10']:.4f}", f"{r['quora']['mrr@10']:.4f}"]
        for run in source(f"{name} *") or []
        for system, r in run["systems"].items()
    ]  # fmt: skip
    return [header, *rows]


def tiers_runs(name: str) -> list[dict]:
    """The summary line of each saved ``dupq-lab tiers`` run in ``name`` (its stdout; the per-tier progress lines
    on stderr, printed after it, are skipped)."""
    return json_lines(name, '{"split"') if (RESULTS / name).is_file() else []


def tiers(name: str = "tiers_test.json", reranked: bool = False) -> list[list[str]]:
    """docs/experiments/10: the choice table, a row per tier of every saved dupq-lab tiers run in ``name``, then BM25;
    ``reranked`` (the README's) adds the reranked tiers (:func:`reranked_tiers`) before BM25."""
    header = ["tier", "help desks, test: Recall@1", "MRR@10", "Quora test+dev rows: MRR@10", "questions/s", "20,000-question collection"]  # fmt: skip
    runs = tiers_runs(name)
    named = [(tier, row) for run in runs for tier, row in run["tiers"].items()]
    named = [  # a transformer's joins (--join) follow it, each a row of its own
        item
        for tier, row in named
        for item in [(tier, row), *((f"{tier}, {k}", v) for k, v in row.items() if k.startswith("joined with"))]
    ]
    if runs and reranked:
        named += reranked_tiers(
            next(row for run in runs for row in run["tiers"].values() if row["folder"] == "bundled")
        )
    if runs:
        named.append(("BM25 (bm25s)", runs[-1]["bm25"]))
    templates = ["{help_desk[recall@1]:.3f}", "{help_desk[mrr@10]:.3f}", "{quora[mrr@10]:.4f}", "{questions_per_s:,.0f}"]  # fmt: skip
    build = lambda row: "{build}" if "build" in row else "{build_20k_s:,.1f} s"  # noqa: E731 - a reranked tier's is text
    return [header, *([tier, *(cell(t, row) for t in [*templates, build(row)])] for tier, row in named)]


def tiers_dev(name: str) -> list[list[str]]:
    """docs/experiments/10: a row per tier of the saved dev-half dupq-lab tiers run in ``name`` (help desks and Quora)."""
    header = ["model", "help desks, dev: Recall@1", "MRR@10", "Quora dev rows: MRR@10"]
    runs = tiers_runs(name)
    named = [(tier, row) for run in runs for tier, row in run["tiers"].items()]
    templates = ["{help_desk[recall@1]:.4f}", "{help_desk[mrr@10]:.4f}", "{quora[mrr@10]:.4f}"]
    return [header, *([tier, *(cell(t, row) for t in templates)] for tier, row in named)]


INDEXES = {"flat": "flat (exact)", "hnsw": "hnsw", "ivfpq": "ivfpq + exact re-ranking"}
TARGET_BYTES, TARGET_RECALL = 48, 0.95  # the target of a compressed index, per question


def indexes() -> list[dict]:
    """docs/results/search_speed.json's indexes, each with its label (its settings) and its bytes on disk."""
    result, found = json.loads((RESULTS / "search_speed.json").read_text()), []
    for kind in (k for k in INDEXES if k in result):
        r, s, label = result[kind], result[kind].get("settings"), INDEXES[kind]
        if kind == "hnsw" and s:
            label += f" (M {s['hnsw_m']}, efConstruction {s['ef_construction']}, efSearch {s['ef_search']})"
        elif kind == "ivfpq" and s:
            label += f" (nlist {s['nlist']}, {s['pq_m']} bytes/code, nprobe {s['nprobe']}, re-rank {s['rerank']})"
        found.append({**r, "label": label, "on_disk": r["size_mb"] * 2**20})
    return found


def search_memory() -> list[list[str]]:
    """Each index's measured bytes a question (its FAISS file) at 10M and 100M questions, and the SQLite store's."""
    result = json.loads((RESULTS / "search_speed.json").read_text())
    n, kinds = result["questions"], [k for k in INDEXES if k in result]
    scaled = lambda b: [f"{b:,}", human(b * n), human(b * 1e7), human(b * 1e8)]  # noqa: E731
    rows = []
    for kind in kinds:
        b, recall = result[kind]["bytes_per_question"], result[kind]["recall@10"]
        rows.append([INDEXES[kind], *scaled(b), "yes" if b <= TARGET_BYTES and recall >= TARGET_RECALL else "no"])
    first = result[kinds[0]]  # every kind's folder holds the same store: the first one's, less its index
    rows.append(
        ["SQLite store (on disk)", *scaled(round(first["size_mb"] * 2**20 / n - first["bytes_per_question"])), ""]
    )
    header = ["index (in memory)", "bytes/question", f"{n:,} questions", "10M questions", "100M questions"]
    return [header + [f"<= {TARGET_BYTES} B/question at recall@10 >= {TARGET_RECALL}"], *rows]


def hnsw(efs: tuple[int, ...] = (16, 24, 32, 40, 48, 64)) -> list[list[str]]:
    """The saved HNSW sweeps: a row per efSearch, a column per graph; the run of seed 1 chose, seed 0 reports."""
    key = ("m", "ef_construction", "ef_search")
    runs = [[json.loads(line) for line in e["output"]] for e in saved("hnsw_sweep.json")]
    choose, report = ({tuple(r[k] for k in key): r for r in lines if "m" in r} for lines in runs)
    chosen = tuple(runs[0][-1]["chosen"][k] for k in key) if runs[0][-1]["chosen"] else None
    graphs = sorted({k[:2] for k in choose})
    rows = [[f"M {m}, efConstruction {efc}: recall@10 (choosing / other queries), p50" for m, efc in graphs]]
    for ef in sorted(set(efs) & {k[2] for k in choose}):
        cells = []
        for g in graphs:
            c, r = choose.get((*g, ef)), report.get((*g, ef))
            text = c and f"{c['recall@10']:.4f} / {r['recall@10']:.4f}, {r['p50_us']:.0f} µs"
            cells.append("-" if c is None else f"**{text}** (chosen)" if (*g, ef) == chosen else text)
        rows.append([str(ef), *cells])
    return [["efSearch", *rows[0]], *rows[1:]]


ROUTES = [  # (files: one per training seed, label); the presets are in lab/presets/
    (["route_bundled_dev.json"], "bundled model (labelled + distil on Quora's pool, word_init teacher)"),
    (["route_0_dev.json", "route_0_s1_dev.json", "route_0_s2_dev.json"], "0: the bundled recipe trained again as the routes were"),
    (["route_a_dev.json", "route_a_s1_dev.json", "route_a_s2_dev.json"], "A: + transfer set (128 taught questions a batch)"),
    (["route_b_dev.json"], "B: + word embeddings at 0.1 x lr"),
    (["route_c_dev.json"], "C: A and B"),
    (["route_d_dev.json"], "D: + the teacher's WordPiece vocabulary, its token vectors as the start"),
    (["route_e_dev.json"], "E (a ceiling): A's teacher and data, the distil loss alone"),
]  # fmt: skip
ROUTE_CELLS = (  # each a saved command's printed JSON: help desks dev, Quora dev pairs, Quora dev rows
    "{ood[dupq][recall@1]:.4f}", "{ood[dupq][mrr@10]:.4f}", "{pairs[accuracy]:.4f}", "{pairs[roc_auc]:.4f}",
    "{rows[dupq][mrr@10]:.4f}",
)  # fmt: skip
EPOCH_SECONDS = re.compile(r"^epoch \d+/\d+ .* (\d+\.\d)s")


def routes() -> list[list[str]]:
    """docs/results/route_*_dev.json: each route's dev figures, its seeds' in order (" / "), and its training time."""
    commands = {"ood": "dupq-lab out-of-domain", "pairs": "dupq-lab quora-dev", "rows": "dupq-lab retrieval"}
    rows = []
    for files, label in ROUTES:
        runs = [f for f in files if (RESULTS / f).is_file()]
        data = [{k: source(f"{f} | {c}") for k, c in commands.items()} for f in runs]
        minutes = [
            sum(float(m.group(1)) for e in saved(f) if e["command"].startswith("dupq train") for line in e["output"]
                if (m := EPOCH_SECONDS.match(line))) / 60
            for f in runs
        ]  # fmt: skip
        cells = [" / ".join(cell(c, d) for d in data) for c in ROUTE_CELLS]
        rows += [[label, *cells, " / ".join(f"{m:.1f}" if m else "(shipped)" for m in minutes)]] if runs else []
    # Route F trains nothing: the bundled model's vectors joined to static ones; its pairs are the bundled model's.
    if static := source("static_branch_dev.json | dupq-lab static-branch"):
        chosen = static["systems"]["model + static dim 128 a 0.002 weight 1"]
        pairs = source("route_bundled_dev.json | dupq-lab quora-dev")
        data = {"ood": {"dupq": chosen["help_desk"]}, "rows": {"dupq": chosen["quora"]}, "pairs": pairs}
        label = "F: the bundled model + a static branch (the teacher's vector of each word, SIF-weighted; 128 wide, weight 1)"
        teacher = f"none (teacher: {static['teacher_seconds']:g} s, 2 widths)"
        rows.append([label, *(cell(c, data) for c in ROUTE_CELLS), teacher])
    header = ["route", "help desks dev: Recall@1", "MRR@10", "Quora dev pairs: accuracy", "ROC-AUC"]
    return [header + ["Quora dev rows: retrieval MRR@10", "training minutes (2 threads)"], *rows]


def dedup_speed() -> list[list[str]]:
    """docs/results/dedup_speed.json: dupq's and SemHash's grouping side by side, then dupq alone on every question."""
    lines = json_lines("dedup_speed.json")
    runs = [x for x in lines if "dupq grouping (cosine)" in x]  # the side-by-side rows, as each size ended
    names = [k for k in runs[0] if k != "questions"]

    def timing(m: dict) -> str:
        return f"{m.get('group_seconds', m['seconds'])} / {m.get('group_cpu_seconds', m['cpu_seconds'])} / {m['peak_gb']:.2f}"

    rows = [[f"{run['questions']:,}", *(timing(run[k]) for k in names)] for run in runs]
    rows += [
        [f"{a['questions']:,} (all)", timing(a), *["not run"] * (len(names) - 1)] for x in lines if (a := x.get("all"))
    ]
    return [["questions", *(f"{k}: wall s / CPU s / peak GB" for k in names)], *rows]


def dedup_plan(n: int = 100_000_000, dim: int = 128) -> list[list[str]]:
    """The 100M-question plan, from the scale run's largest archive: hours of one core, then minutes on a cluster."""
    big = dedup("dedup_scale.json")["runs"][-1]
    core_us = big["cpu_microseconds_per_question"]  # CPU time a question, all threads together
    core_minutes = n * core_us / 1e6 / 60
    vectors_gb = n * (4 * dim + 8) / 1e9  # float32 vectors + list ids: the inverted file, spread over the tasks
    minutes = f"minutes for 100M questions (at the {big['questions']:,}-question run's {core_us:.0f} CPU µs a question: {core_minutes / 60:.1f} core-hours)"
    rows = [
        [f"{k} nodes x {c} cores", str(k * c), f"{core_minutes / (k * c):.1f}", f"{vectors_gb:.0f} GB"]
        for k, c in ((4, 16), (16, 16), (32, 32))
    ]
    return [["cluster", "cores", minutes, "vectors + lists in the object store"], *rows]


def median_run() -> dict:
    """The run of docs/results/train_speed.json (each a fresh process) whose Keras ratio is their median."""
    runs = source("train_speed.json *")
    return sorted(runs, key=lambda run: run["seed_vs_keras"])[len(runs) // 2]


def dedup(name: str) -> dict:
    """What a saved `dupq-lab dedup-scale` run printed as its result (its rows on stderr are left out)."""
    return next(x for x in json_lines(name) if "machine" in x)


def sweep(name: str) -> list[dict]:
    """A sweep's rows (docs/results/NAME, one JSON line a configuration), ordered by what chose among them: dev accuracy."""
    rows = [json.loads(line) for line in (RESULTS / name).read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r.get("dev_accuracy") or 0)


# -- the declarations -----------------------------------------------------------------------------------------


def measures(system: str, *keys: str, spec: str = ".4f") -> str:
    """The cells of ``system``'s measures ``keys`` (default: the retrieval measures), each as ``spec`` writes it."""
    keys = keys or ("mrr@10", "ndcg@10", "recall@1", "recall@10", "p@1")
    return " | ".join(f"{{{system}[{k}]:{spec}}}" for k in keys)


def heldout(task: str, name: str) -> list[str]:
    """One retrieval task's rows (its saved result ``name``): a system each, the adapted model from its own file."""
    systems = [(f"{name}[dupq]", "dupq bundled"), (f"{name}_adapted[dupq]", "dupq bundled, adapted (`dupq adapt`)")]
    systems += [(f"{name}[minilm]", "all-MiniLM-L6-v2 zero-shot"), (f"{name}[bm25]", "BM25 (bm25s)")]
    return [f"{task} | {label} | {measures(system)}" for system, label in systems]


# fmt: off
SWEEP = (
    "configuration | command | val acc. | dev acc. | dev MRR | dev MRR@10 | test acc. | ROC-AUC | ECE | test MRR | test MRR@10 | clean acc. | clean AUC | best epoch | train s",
    "{it[name]} | `{it[command]}` | {it[val_accuracy]} | {it[dev_accuracy]} | {it[dev_mrr]} | {it[dev_mrr@10]} | {it[test_accuracy]} | {it[roc_auc]} | {it[test_ece]} | {it[test_mrr]} | {it[test_mrr@10]} | {it[clean_accuracy]} | {it[clean_roc_auc]} | {it[best_epoch]} | {it[train_seconds]}",
)
SIDE = "{{s[{0}][search_per_s]:,.0f}} | {{s[{0}][search_p50_ms]:.1f}} / {{s[{0}][search_p99_ms]:.1f}} ms | {{s[{0}][mixed_search_per_s]:,.0f}}, {{s[{0}][mixed_p99_ms]:.1f}} ms | {{s[{0}][in_process_per_s]:,.0f}}/s, p50 {{s[{0}][in_process_p50_ms]:.2f}} ms | {{s[{0}][kill9_lost]}} / {{s[{0}][kill9_acked]:,}}"
PGVECTOR = "{{r[results][{0}][build_s]:,.1f}} s | {{r[results][{0}][none][p50_ms]:.2f}} / {{r[results][{0}][none][p99_ms]:.2f}} ms | {{r[results][{0}][none][recall@10]:.4f}} | {{r[results][{0}][50%][recall@10]:.4f}} / {{r[results][{0}][5%][recall@10]:.4f}} / {{r[results][{0}][0.1%][recall@10]:.4f}} | {{r[results][{0}][50%][p50_ms]:.1f}} / {{r[results][{0}][5%][p50_ms]:.1f}} / {{r[results][{0}][0.1%][p50_ms]:.1f}} ms"
STAGE_8 = ("mrr", "recall@1", "mrr_filtered", "mrr_any")
INT8 = (  # dupq-lab int8's table: header, then the row of each variant
    "model / variant | questions/s | / torch float32 | one question alone | cosine to float32: mean (1st percentile) | help-desk dev Recall@1 (lost)",
    "{key} | {it[questions_per_s]:,} | {it[speedup]}x | {it[one_query_ms]} ms | {it[cosine_to_float32][mean]} ({it[cosine_to_float32][p1]}) | {it[recall@1]:.3f} ({it[recall@1_lost]:+.3f})",
)


def int8_variants(spec: str) -> dict:
    """Every variant of every ``dupq-lab int8`` run in ``spec`` (a run stopped after a model: that model's line)."""
    return {k: v for run in source(spec) or [] for k, v in run.get("variants", run).items()}


TABLES: dict[str, Table] = {
    "summary": Table(  # README: the models on the seed's test pairs, at the dev-chosen threshold
        header="model | accuracy | ROC-AUC | ECE",
        data={"sweep": "*.jsonl", "minilm": "peers_minilm.json", "mpnet": "peers_mpnet.json"},
        rows=(
            "dupq bundled (labelled recipe + distilled MiniLM) | " + measures("sweep[distil-words-6]", "test_accuracy", "roc_auc", "test_ece", spec=".4f~"),
            "dupq, labelled recipe without the teacher | " + measures("sweep[labelled-mlp-6]", "test_accuracy", "roc_auc", "test_ece", spec=".4f~"),
            "dupq, the duplicates-only model before them | " + measures("sweep[seed-best]", "test_accuracy", "roc_auc", "test_ece", spec=".4f~"),
            "all-MiniLM-L6-v2 zero-shot (`dupq-lab peers`) | " + measures("minilm[test]", "accuracy", "roc_auc", "expected_calibration_error", spec=".4f~") + " (Platt)",
            "all-mpnet-base-v2 zero-shot (`dupq-lab peers --model-folder`) | " + measures("mpnet[test]", "accuracy", "roc_auc", "expected_calibration_error", spec=".4f~") + " (Platt)",
        ),
    ),
    "heldout": Table(  # docs/experiments/9: every retrieval measure of each task, a row per system
        header="task | system | MRR@10 | nDCG@10 | Recall@1 | Recall@10 | P@1",
        labels=2,
        data={
            "quora": "retrieval_heldout.json",
            **{f"{s}{a}": f"out_of_domain{a}_{s}.json" for s in ("dev", "test") for a in ("", "_adapted")},
            **{f"{s}_questions": lambda s=s: sum(source(f"out_of_domain_{s}.json")[k] for k in ("old_questions", "distractors")) for s in ("dev", "test")},
        },
        rows=(
            *heldout("Quora test+dev rows: {quora[queries]:,} queries, {quora[corpus]:,} questions", "quora"),
            *heldout("help desks, dev half: {dev[queries]} queries, {dev_questions:,} questions", "dev"),
            *heldout("help desks, test half: {test[queries]} queries, {test_questions:,} questions", "test"),
        ),
    ),
    "retrieval-stage-8": Table(  # docs/experiments/8: question2's rank, every model measured at stage 8 (a record)
        header="model | MRR (published) | Recall@1 | MRR, other known duplicates filtered | MRR, any known duplicate",
        data={
            "r": "retrieval.json", "minilm": "peers_minilm.json", "mpnet": "peers_mpnet.json",
            "mpnet_student": "mpnet_student_retrieval.json | dupq-lab retrieval --model runs/student-mpnet-half",
            "wide": "wide_student.json | dupq-lab retrieval --model runs/wide256-half",
            "bilstm": "bilstm_student.json | dupq-lab retrieval --model runs/bilstm-half",
            "closure": "retrieval_closure.json | dupq-lab retrieval --closure",
        },
        rows=(
            "dupq bundled (distilled from all-MiniLM-L6-v2) | " + measures("r[dupq]", *STAGE_8),
            "dupq, the same recipe distilled from all-mpnet-base-v2 | " + measures("mpnet_student[dupq]", *STAGE_8),
            "dupq, the same recipe at width 256 | " + measures("wide[dupq]", *STAGE_8),
            "dupq, the same recipe with a bidirectional LSTM | " + measures("bilstm[dupq]", *STAGE_8),
            "BM25 | " + measures("r[bm25]", *STAGE_8),
            "all-MiniLM-L6-v2 zero-shot | " + measures("minilm[retrieval][test]", *STAGE_8),
            "all-mpnet-base-v2 zero-shot | " + measures("mpnet[retrieval][test]", *STAGE_8),
            "oracle: every known duplicate first, in random order | {r[ceiling]:.4f} | - | 1 | 1",
            "the same oracle, duplicates of duplicates known too (`--closure`) | {closure[ceiling]:.4f} | - | 1 | 1",
        ),
    ),
    "speed": Table(  # README: the service and training, each against its before in one run
        header="on the 2-core CPU VM | before (main at {s[baseline][label]}) | now | ratio",
        data={"s": "service_side_by_side.json", "runs": lambda: len(source("train_speed.json *")), "t": median_run},
        rows=(
            "`dupq serve`, 16 clients searching 537,617 questions (HNSW): searches/s | {s[baseline][search_per_s]:,.0f} | {s[current][search_per_s]:,.0f} | {s[search_per_s_ratio]:.2f}x",
            "the same: p99 searching / searching while adding | {s[baseline][search_p99_ms]:.0f} / {s[baseline][mixed_p99_ms]:.0f} ms | {s[current][search_p99_ms]:.0f} / {s[current][mixed_p99_ms]:.0f} ms | ",
            "one search in process (encode, HNSW, hits), p50 | {s[baseline][in_process_p50_ms]:.2f} ms | {s[current][in_process_p50_ms]:.2f} ms | {s[in_process_per_s_ratio]:.2f}x",
            "training, the seed recipe: pairs/s (before: the seeds' Keras model; the median of {runs} runs) | {t[keras_seed_pairs_per_s]:,} | {t[train_pairs_per_s][seed]:,} | {t[seed_vs_keras]:.2f}x",
            "encoding questions/s (the bundled model's shape) |  | {t[encode_questions_per_s]:,} | ",
        ),
    ),
    "service": Table(  # docs/serve.md: the side-by-side service run, a row per side
        header="code | searches/s | p50 / p99 | with adds: searches/s, p99 | in-process single search | kill -9: lost / acked",
        data={"s": "service_side_by_side.json"},
        rows=(
            "main at {s[baseline][label]}, one process | " + SIDE.format("baseline"),
            "this code, `dupq serve` default workers | " + SIDE.format("current"),
            "ratio | {s[search_per_s_ratio]:.2f}x |  |  | {s[in_process_per_s_ratio]:.2f}x | ",
        ),
    ),
    "pgvector-speed": Table(  # docs/collections.md: pgvector beside a folder's FAISS HNSW, one run on the same vectors
        header="{r[questions]:,} questions, {r[queries]} queries ({r[cpus]}-core {r[machine]}) | build | p50 / p99 | recall@10 | filtered recall@10 at 50 / 5 / 0.1 % | filtered p50",
        data={"r": "pgvector_speed.json"},
        rows=(
            "folder: FAISS HNSW, in process | " + PGVECTOR.format("faiss_hnsw"),
            "Postgres: pgvector HNSW, over a local socket | " + PGVECTOR.format("pgvector_hnsw"),
        ),
    ),
    "pg-two-servers": Table(  # docs/collections.md: two `dupq serve` on one table, each killed with kill -9 once
        header="adds acknowledged | lost | stored twice | adds/s | requests sent / unanswered | killed, then down for | stale searches after a remove / an update",
        data={"r": "pg_two_servers.json"},
        labels=0,
        rows=(
            "{r[acknowledged]:,} of {r[adds]:,} | {r[lost]} | {r[twice]} | {r[adds_per_s]:,.0f} | {r[requests][sent]:,} / {r[requests][unanswered]:,} | {r[restarts][0][down_s]:.0f} s, {r[restarts][1][down_s]:.0f} s | {r[remove][stale]} of {r[remove][probes]} / {r[update][stale]} of {r[update][probes]}",
        ),
    ),
    "dedup-quality": Table(  # docs/dedup.md: each grouping's pairwise precision, recall and F1 on dev and test
        header="grouping | dev P / R / F1 | test P / R / F1 | groups | largest group | pairs its groups imply",
        data={"r": lambda: dedup("dedup_quality.json")["groupings"]}, each="r",
        rows=("{key} | {it[dev][precision]:.3f} / {it[dev][recall]:.3f} / {it[dev][f1]:.3f} | {it[test][precision]:.3f} / {it[test][recall]:.3f} / {it[test][f1]:.3f} | {it[groups]:,} | {it[largest]:,} | {it[implied_pairs]:,}",),
    ),
    "dedup-rerank": Table(  # docs/dedup.md: the groups with and without a reranker judging the candidates
        header="judged by | dev P / R / F1 | test P / R / F1 | groups | largest group | grouping s",
        data={"r": lambda: dedup("dedup_rerank.json")["groupings"]}, each="r",
        rows=("{key} | {it[dev][precision]:.3f} / {it[dev][recall]:.3f} / {it[dev][f1]:.3f} | {it[test][precision]:.3f} / {it[test][recall]:.3f} / {it[test][f1]:.3f} | {it[groups]:,} | {it[largest]:,} | {it[group_seconds]}",),
    ),
    "dedup-scale": Table(  # docs/dedup.md: the cost a question of grouping synthetic archives
        header="questions | grouping: wall s | wall µs a question | CPU s | CPU µs a question | grouped | peak GB",
        data={"r": lambda: dedup("dedup_scale.json")["runs"]}, each="r",
        rows=("{it[questions]:,} | {it[group_seconds]} | {it[microseconds_per_question]} | {it[group_cpu_seconds]} | {it[cpu_microseconds_per_question]} | {it[grouped]:,} | {it[peak_gb]:.2f}",),
    ),
    "dedup-beams": Table(  # docs/scale.md: each HNSW beam of the probes, its cost and what it finds
        header="HNSW beam (efSearch) | CPU µs a question | neighbours above cosine {r[cosine]} found",
        data={"r": lambda: dedup("dedup_beams.json"), "beams": lambda: dedup("dedup_beams.json")["beams"]}, each="beams",
        rows=("{it[beam]} x nprobe ({it[efSearch]}) | {it[cpu_microseconds_per_question]} | {it[close_neighbours_found]}",),
    ),
    "search-speed": Table(  # docs/collections.md: each index of every Quora question: build, size, latency, recall
        header="index | build | on disk (store + index) | single query p50 / p99 (search alone p50) | batches of 256 | recall@10 vs exact",
        data={"i": indexes}, each="i",
        rows=("{it[label]} | {it[build_s]} s | {it[on_disk]:bytes} | {it[p50_ms]} / {it[p99_ms]} ms ({it[index_p50_ms]} ms) | {it[batch256_qps]:,} q/s | {it[recall@10]}",),
    ),
    "int8": Table(  # docs/transformers.md: each named transformer run every way (torch, ONNX Runtime; float32, int8), a model's side by side in one run
        header=INT8[0], rows=INT8[1:], each="variants",
        data={"variants": lambda: int8_variants("int8.json *")},
    ),
    "int8-recall": Table(  # docs/transformers.md: mpnet's int8 that keeps the agreement, on the help-desk dev half too
        header=INT8[0], rows=INT8[1:], each="variants",
        data={"variants": lambda: int8_variants("int8_recall.json *")},
    ),
    "int8-ceiling": Table(  # docs/transformers.md: a named transformer's weight product float32 against int8, its encoder's profile, Amdahl
        header="model | weight product (rows x in x out) | ONNX Runtime float32 / int8 GFLOP/s | int8 product speedup alone: ONNX Runtime (torch) | in the encoder | encoder time in weight products: float32 (int8) graph | Amdahl ceiling (were they free) | int8 graph measured | ONNX Runtime float32 / torch float32 | ceiling / torch float32",
        data={"models": lambda: (source("int8_ceiling.json") or {}).get("models", {})}, each="models",
        rows=("{key} | {it[kernel][shape]} | {it[kernel][onnx float32][gflops]} / {it[kernel][onnx int8][gflops]} | {it[kernel][int8_speedup][onnx]}x ({it[kernel][int8_speedup][torch]}x) | {it[weight_matmul_speedup_in_encoder]}x | {it[profile][onnx float32][weight_matmul_share]} ({it[profile][onnx int8][weight_matmul_share]}) | {it[amdahl_ceiling]}x ({it[no_matmul_ceiling]}x) | {it[measured_int8_speedup]}x | {it[onnx_float32_over_torch]}x | {it[ceiling_over_torch_float32]}x",),
    ),
    "labelled-sweep": Table(header=SWEEP[0], rows=SWEEP[1:], data={"rows": lambda: sweep("labelled.jsonl")}, each="rows"),
    "distil-sweep": Table(header=SWEEP[0], rows=SWEEP[1:], data={"rows": lambda: sweep("distil.jsonl")}, each="rows"),
    "dedup-speed": Table(render=dedup_speed),
    "dedup-plan": Table(render=dedup_plan),
    "adapt": Table(render=adapt),
    "search-memory": Table(render=search_memory),
    "hnsw": Table(render=hnsw),
    "routes": Table(render=routes),
    "branch-sources": Table(render=lambda: branch("static_branch_sources_dev.json")),
    "branch-adapted-weights": Table(render=lambda: branch("static_branch_adapted_weights_dev.json")),
    "tiers": Table(render=tiers),
    "choice": Table(render=lambda: tiers(reranked=True)),  # README: the tiers, and the bundled model reranked
    "adapt-epochs": Table(render=lambda: tiers_dev("adapt_epochs_dev.json")),
    "small-desk": Table(render=small_desk),
    "rerank-k": Table(render=rerank_k),  # docs/collections.md: Recall@1 and cost per K of a reranked collection
    "rerank-k-mpnet": Table(render=lambda: rerank_k("mpnet")),  # docs/collections.md: the same, mpnet reranking
    "rerank-retrieval": Table(render=rerank_retrieval),
    "rerank-weights": Table(render=rerank_weights),  # docs/collections.md: the model's cosine weighted in, on dev  # docs/collections.md: Quora retrieval reranked, per K
    "error-codes": Table(render=error_codes),  # docs/collections.md: questions naming an error code, Recall@1
}
# fmt: on
