"""Whether a `dupq` command imports torch: the command run in a fresh interpreter that says so once it is done."""

from __future__ import annotations

import subprocess
import sys

# Run `dupq ARGS` as the installed command does, in this fresh interpreter, then say whether torch came in.
RUN = """
import sys
from dupq.cli import app
try:
    app(sys.argv[1:], prog_name="dupq")
except SystemExit as e:
    if e.code:
        raise
print("torch imported:", "torch" in sys.modules)
"""

PAIR = ["How do I learn Python?", "What is the best way to learn Python?"]


def imports_torch(*args: str) -> bool:
    done = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout.strip().splitlines()[-1] == "torch imported: True"
