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

MODULES = """
    speed.cold_start speed.search_speed speed.single_search speed.filtered_search speed.removal_cost
    speed.hnsw_sweep speed.pgvector_sweep speed.pgvector_speed speed.predict_stream speed.train_speed
    speed.keras_seed speed.train_step speed.ddp_speed speed.lstm_roofline speed.teacher_speed speed.dedup_scale
    service.service_load service.service_side_by_side service.reencode_while_serving service.pg_two_servers
    peers experiments.retrieval experiments.out_of_domain experiments.tiers experiments.small_desk
    experiments.desk_calibration experiments.desk_verdict experiments.judged_pool experiments.desk_loop
    experiments.named_calibration speed.int8 speed.int8_ceiling experiments.rerank_k speed.rerank_cost
    experiments.rerank_retrieval experiments.error_codes
""".split()  # the measurements, in the order --help lists them
# command: its module, whose docstring's first line is its help; a measurement's command is its module's name
COMMANDS = {"figures": "update_docs"} | {m.rsplit(".", 1)[-1].replace("_", "-"): m for m in MODULES}


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
