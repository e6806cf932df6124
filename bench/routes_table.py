"""The routes to a student that knows what words mean, on dev, from saved results; prints a Markdown table.

    python bench/routes_table.py

Reads docs/results/route_*_dev.json, each the commands of one route and what they printed: its
training (``dupq train``, whose epoch lines give the training time), then on its float16 export
``bench/quora_dev.py`` (Quora's dev pairs), ``bench/out_of_domain.py --split dev`` (the help-desk
yardstick's dev half) and ``bench/retrieval.py --split dev`` (Quora's dev rows as a search task).
route_bundled_dev.json holds the bundled model's, by the same three commands. A route trained
with several seeds (``--seed``) has a file per seed, and each cell lists the seeds' figures in
order, separated by " / ". Route F trains nothing: static_branch_dev.json holds
``bench/static_branch.py --split dev``, the bundled model's vectors joined to static ones, whose
chosen setting is its row (pairs are judged by the bundled model's head, as before, so the pair
columns are the bundled model's). Nothing is measured here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
ROUTES = [  # (files: one per training seed, label); the presets are in bench/presets/
    (["route_bundled_dev.json"], "bundled model (labelled + distil on Quora's pool, word_init teacher)"),
    (
        ["route_0_dev.json", "route_0_s1_dev.json", "route_0_s2_dev.json"],
        "0: the bundled recipe trained again as the routes were",
    ),
    (
        ["route_a_dev.json", "route_a_s1_dev.json", "route_a_s2_dev.json"],
        "A: + transfer set (128 taught questions a batch)",
    ),
    (["route_b_dev.json"], "B: + word embeddings at 0.1 x lr"),
    (["route_c_dev.json"], "C: A and B"),
    (["route_d_dev.json"], "D: + the teacher's WordPiece vocabulary, its token vectors as the start"),
    (["route_e_dev.json"], "E (a ceiling): A's teacher and data, the distil loss alone"),
]
COLUMNS = [  # (the saved command whose printed JSON holds the figure, the keys that lead to it)
    ("python bench/out_of_domain.py", ("dupq", "recall@1")),
    ("python bench/out_of_domain.py", ("dupq", "mrr@10")),
    ("python bench/quora_dev.py", ("accuracy",)),
    ("python bench/quora_dev.py", ("roc_auc",)),
    ("python bench/retrieval.py", ("dupq", "mrr@10")),
]
STATIC = (  # route F: its saved file, its label, and the system of it the row shows (chosen on dev)
    "static_branch_dev.json",
    "F: the bundled model + a static branch (the teacher's vector of each word, SIF-weighted; 128 wide, weight 1)",
    "model + static dim 128 a 0.002 weight 1",
)
EPOCH_SECONDS = re.compile(r"^epoch \d+/\d+ .* (\d+\.\d)s")


def printed(entries: list[dict], command: str) -> dict:
    """The JSON line the saved command starting with ``command`` printed last."""
    entry = next(e for e in entries if e["command"].startswith(command))
    return json.loads(entry["output"][-1])


def figure(entries: list[dict], command: str, keys: tuple[str, ...]) -> float:
    """One figure of what the saved ``command`` printed, found by ``keys``."""
    value = printed(entries, command)
    for key in keys:
        value = value[key]
    return value


def training_minutes(entries: list[dict]) -> str:
    """The training's epochs' seconds, summed, in minutes; '' where the file holds no training."""
    seconds = [
        float(m.group(1))
        for e in entries
        if e["command"].startswith("dupq train")
        for line in e["output"]
        if (m := EPOCH_SECONDS.match(line))
    ]
    return f"{sum(seconds) / 60:.1f}" if seconds else "(shipped)"


def main() -> None:
    print(
        "| route | help desks dev: Recall@1 | MRR@10 | Quora dev pairs: accuracy | ROC-AUC "
        "| Quora dev rows: retrieval MRR@10 | training minutes (2 threads) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for files, label in ROUTES:
        runs = [json.loads((RESULTS / f).read_text()) for f in files if (RESULTS / f).is_file()]
        if not runs:
            continue
        cells = [" / ".join(f"{figure(e, command, keys):.4f}" for e in runs) for command, keys in COLUMNS]
        cells.append(" / ".join(training_minutes(e) for e in runs))
        print(f"| {label} | {' | '.join(cells)} |")
    file, label, name = STATIC
    if (RESULTS / file).is_file():
        entries = json.loads((RESULTS / file).read_text())
        chosen = figure(entries, "python bench/static_branch.py", ("systems", name))
        bundled = json.loads((RESULTS / ROUTES[0][0][0]).read_text())
        cells = [
            chosen["help_desk"]["recall@1"],
            chosen["help_desk"]["mrr@10"],
            figure(bundled, "python bench/quora_dev.py", ("accuracy",)),
            figure(bundled, "python bench/quora_dev.py", ("roc_auc",)),
            chosen["quora"]["mrr@10"],
        ]
        teacher = figure(entries, "python bench/static_branch.py", ("teacher_seconds",))
        print(f"| {label} | {' | '.join(f'{c:.4f}' for c in cells)} | none (teacher: {teacher:g} s, 2 widths) |")


if __name__ == "__main__":
    main()
