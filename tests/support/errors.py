"""The one-sentence promise, checked: a user mistake is answered with exit status 2 and one ``error:`` line.

:func:`refused` takes what a test got from running the CLI either way: a ``CliRunner`` result (in this
process) or a ``subprocess.CompletedProcess`` (``dupq`` run as a user runs it).
"""

from __future__ import annotations

import subprocess


def _text(data: str | bytes | None) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data or ""


def refused(result, *saying: str | bytes) -> str:
    """Check that ``result`` is a refusal as dupq promises: exit 2, no traceback, and on stderr one ``error:``
    sentence (lines of skipped input and warnings aside) holding each of ``saying``. Returns the sentence."""
    if isinstance(result, subprocess.CompletedProcess):
        code, out, err = result.returncode, _text(result.stdout), _text(result.stderr)
    else:  # a click.testing.Result: an exception other than SystemExit is a crash
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        code, out, err = result.exit_code, result.stdout, result.stderr
    lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith(("skipped", "warning"))]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-600:])
    assert "Traceback" not in out + err, err[-600:]
    for words in saying:
        words = _text(words)
        assert words in lines[0], (words, lines[0])
    return lines[0]


def library_refuses(call) -> bool:
    """Whether ``call()`` raises dupq's one-sentence error."""
    from dupq.core.errors import DupqError

    try:
        call()
    except DupqError:
        return True
    return False
