"""Small file helpers shared by every stage: the user-facing error and crash-safe writes.

Anything dupq writes that a user would hate to lose (a model, a checkpoint, an index) goes
through :func:`atomic_write`: the bytes land in a temporary file in the same folder, are
flushed to disk, and only then renamed over the target, so a crash leaves either the old
file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class DupqError(Exception):
    """A mistake the user can fix (bad path, column, file or argument).

    The message is one sentence naming what is wrong and where; the CLI prints it and
    exits with status 2 instead of showing a traceback.
    """


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a model or report should read like any file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(folder: Path) -> None:
    # Make the rename itself durable; not every platform lets a folder be opened.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as indented UTF-8 JSON."""
    atomic_write(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Read a JSON file, turning a missing or malformed file into one clear :class:`DupqError`."""
    path = Path(path)
    if not path.is_file():
        raise DupqError(f"{what} is missing: {path} does not exist.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DupqError(f"{what} is corrupt: {path} is not valid JSON ({e}).") from None
