"""dupq-lab: one command per measurement behind dupq's docs, and `figures`, which renders them into the docs.

Each command is a module of the lab, imported only when it runs (torch, FAISS and Ray load as a measurement needs
them); its options are its ``main``'s typer parameters (``dupq-lab COMMAND --help``), the ones several share declared
once in :mod:`dupq_lab.options`. ``python -m dupq_lab cold-start`` is ``dupq-lab cold-start``.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import typer

app = typer.Typer(help=__doc__.splitlines()[0], no_args_is_help=True, add_completion=False)

COMMANDS = {  # command: its module, whose docstring's first line is its help
    "figures": "update_docs",
    "cold-start": "speed.cold_start",
    "search-speed": "speed.search_speed",
    "single-search": "speed.single_search",
    "filtered-search": "speed.filtered_search",
    "removal-cost": "speed.removal_cost",
    "hnsw-sweep": "speed.hnsw_sweep",
    "pgvector-sweep": "speed.pgvector_sweep",
    "pgvector-speed": "speed.pgvector_speed",
    "predict-stream": "speed.predict_stream",
    "train-speed": "speed.train_speed",
    "keras-seed": "speed.keras_seed",
    "train-step": "speed.train_step",
    "ddp-speed": "speed.ddp_speed",
    "lstm-roofline": "speed.lstm_roofline",
    "teacher-speed": "speed.teacher_speed",
    "dedup-scale": "speed.dedup_scale",
    "service-load": "service.service_load",
    "service-side-by-side": "service.service_side_by_side",
    "reencode-while-serving": "service.reencode_while_serving",
    "pg-two-servers": "service.pg_two_servers",
    "peers": "peers",
    "retrieval": "experiments.retrieval",
    "out-of-domain": "experiments.out_of_domain",
    "tiers": "experiments.tiers",
    "small-desk": "experiments.small_desk",
    "desk-calibration": "experiments.desk_calibration",
    "desk-verdict": "experiments.desk_verdict",
    "judged-pool": "experiments.judged_pool",
    "desk-loop": "experiments.desk_loop",
    "named-calibration": "experiments.named_calibration",
    "int8": "speed.int8",
    "int8-ceiling": "speed.int8_ceiling",
    "rerank-k": "experiments.rerank_k",
    "rerank-cost": "speed.rerank_cost",
    "rerank-retrieval": "experiments.rerank_retrieval",
    "error-codes": "experiments.error_codes",
}


def _register(name: str, module: str) -> None:
    source = importlib.util.find_spec(f"dupq_lab.{module}").origin  # its docstring, without importing it
    doc = ast.get_docstring(ast.parse(Path(source).read_text()))

    def run(ctx: typer.Context) -> None:
        command = typer.Typer(add_completion=False)
        command.command(help=doc.split("\n\n")[0])(importlib.import_module(f"dupq_lab.{module}").main)
        command(args=ctx.args, prog_name=f"dupq-lab {name}")  # its options are parsed here, once it is imported

    settings = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
    app.command(name, help=doc.splitlines()[0], context_settings=settings, add_help_option=False)(run)


for _name, _module in COMMANDS.items():
    _register(_name, _module)


def main() -> None:
    app()
