"""The ``dupq`` command line: one typer app of thin commands over the library, a module per command group.

The modules register their commands on :data:`dupq.cli.common.app` when imported, in the order
``dupq --help`` lists them: make a model, judge pairs, keep a collection, the teacher, adapt to your questions.
"""

# isort: off
from dupq.cli import train, judge, index, search, dedup, distil, adapt  # noqa: F401 - each registers its commands
from dupq.cli.common import app

# isort: on


def main() -> None:
    app()
