"""dupq-lab: one command per measurement of dupq's docs, and ``figures``, which renders them into the docs.

Each command is a module of the lab, imported only when it runs (torch, FAISS and Ray load as a measurement needs
them); its options are its ``main``'s typer parameters (``dupq-lab COMMAND --help``), the ones several share declared
once in :mod:`dupq_lab.options`. A module runs alone too: ``python -m dupq_lab.speed.cold_start`` is
``dupq-lab cold-start``.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(help=__doc__.splitlines()[0], no_args_is_help=True, add_completion=False)

COMMANDS = {  # command: (module, what it measures)
    "figures": ("update_docs", "Regenerate the figures of README.md and docs/ (--check: exit 1 where one would change)."),
    "cold-start": ("speed.cold_start", "Cold wall time of `dupq predict` and `dupq search`, a fresh process a run."),
    "encode-speed": ("speed.encode_speed", "How fast model folders encode questions, side by side."),
    "search-speed": ("speed.search_speed", "A collection of every Quora question: build, size, latency, recall."),
    "single-search": ("speed.single_search", "One search at a time in process: NumPy's forward passes against torch's."),
    "filtered-search": ("speed.filtered_search", "Filtered (scoped) search: recall@10 against the exact filtered search."),
    "hnsw-sweep": ("speed.hnsw_sweep", "HNSW's cost against its recall: which M, efConstruction, efSearch."),
    "predict-stream": ("speed.predict_stream", "Throughput and memory of `dupq predict --pairs` over a million lines."),
    "train-speed": ("speed.train_speed", "Training speed of each recipe and encoding speed (--keras: the seeds' model)."),
    "keras-seed": ("speed.keras_seed", "The seeds' Keras model, trained only to time it (train-speed --keras runs it)."),
    "train-step": ("speed.train_step", "Where a training step's time goes, per recipe and batching variant."),
    "ddp-speed": ("speed.ddp_speed", "Training speed on 1 and 2 processes, and the share spent communicating."),
    "lstm-roofline": ("speed.lstm_roofline", "How close the training step's LSTM runs to the machine's arithmetic speed."),
    "teacher-speed": ("speed.teacher_speed", "The teacher under bfloat16 autocast against float32: speed and agreement."),
    "dedup-scale": ("speed.dedup_scale", "`dupq dedup` at scale beside SemHash: time, memory, the groups' quality."),
    "service-load": ("service.service_load", "Load and fault test of `dupq serve`: throughput, latency, kill -9 during adds."),
    "service-side-by-side": ("service.service_side_by_side", "This code's service against an earlier revision's, in one run."),
    "calibration": ("experiments.calibration", "How well each calibration method turns pair logits into probabilities."),
    "desk-calibration": ("experiments.desk_calibration", "Calibrating on a help desk's own decisions, against Quora's."),
    "pair-words": ("experiments.pair_words", "How the labels treat pairs that differ by a few words, one of them WORD."),
}  # fmt: skip


def _register(name: str, module: str, help: str) -> None:
    def run(ctx: typer.Context) -> None:
        measure = importlib.import_module(f"dupq_lab.{module}")
        command = typer.Typer(add_completion=False)
        command.command(help=measure.__doc__.split("\n\n")[0])(measure.main)
        command(args=ctx.args, prog_name=f"dupq-lab {name}")  # its options are parsed here, once it is imported

    settings = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
    app.command(name, help=help, context_settings=settings, add_help_option=False)(run)


for _name, (_module, _help) in COMMANDS.items():
    _register(_name, _module, _help)


def main() -> None:
    app()
