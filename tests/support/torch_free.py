"""Whether a `dupq` command imports torch: the command run in a fresh interpreter that says so once it is done."""

from __future__ import annotations

import subprocess
import sys

# Run `dupq ARGS` as the installed command does, in this fresh interpreter, then say whether torch came in.
RUN = """
from dupq.cli import app
try:
    app(sys.argv[1:], prog_name="dupq")
except SystemExit as e:
    if e.code:
        raise
print("torch imported:", "torch" in sys.modules)
"""

PAIR = ["How do I learn Python?", "What is the best way to learn Python?"]


def fresh(code: str, *args: str) -> list[str]:
    """The lines ``code`` prints in a fresh interpreter (``sys`` imported, ``args`` its arguments), which must
    succeed without a traceback."""
    command = [sys.executable, "-c", "import sys\n" + code, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout.splitlines()


def imports_torch(*args: str) -> bool:
    return fresh(RUN, *args)[-1] == "torch imported: True"
