"""Small file helpers shared by every stage: crash-safe writes and checked reads.

Anything dupq writes that a user would hate to lose (a model, a checkpoint, an index) goes through :func:`atomic_write`:
the bytes land in a temporary file in the same folder, are flushed to disk, and only then renamed over the target, so a
crash leaves either the old file or the new one, never half of one. A temporary name holds the writer's process id, so
:func:`remove_stale` can delete what a killed writer left behind without touching a live one's.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from dupq.core.errors import DupqError
from dupq.core.nesting import MAX_FILE_DEPTH, json_depth


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename (see :func:`atomic_output`)."""
    with atomic_output(path) as f:
        f.write(data)


@contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through: a temporary file beside it, renamed into place when the block ends
    without an error and removed when it does not, so ``path`` is whole or untouched.

    ``path``'s folder must exist (a mistyped folder is refused, not created), and ``path`` must not be a folder. An
    error of the file system (no space, no permission) names ``path``, never the temporary file.
    """
    path = Path(path)
    check_target(path, folder=False)
    with _naming(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a model or report should read like any file
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    fsync_dir(path.parent)


def check_target(path: Path, *, folder: bool) -> None:
    """Refuse to write ``path`` when its parent folder is missing (or a file), or when a file is to
    replace a folder or a folder a file: one sentence naming the path the user gave."""
    parent = path.parent
    if not parent.is_dir():
        what = "is a file" if parent.exists() else "does not exist"
        raise DupqError(f"cannot write {path}: the folder {parent} {what}; create it first, or choose another place.")
    if not folder and path.is_dir():
        raise DupqError(f"cannot write {path}: it is a folder; name a file.")
    if folder and path.exists() and not path.is_dir():
        raise DupqError(f"cannot write the folder {path}: it is a file; name a folder.")


def check_apart(out: str | os.PathLike, *inputs: str | os.PathLike | None) -> None:
    """Refuse to write ``out`` over what a command reads: the rule of every command that reads a file and writes one.

    ``out`` may not be one of ``inputs`` (files or folders; None skipped) under another spelling, through a
    link or a hard link, nor lie inside an input folder (a collection's database, a work folder), nor hold
    an input (a folder to be replaced that holds the model read). One sentence naming both.
    """
    out = Path(out)
    where = out.resolve()
    for given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        same = where == source or (where.exists() and source.exists() and os.path.samefile(where, source))
        if same or source in where.parents or where in source.parents:
            relation = "is" if same else "lies inside" if source in where.parents else "holds"
            raise DupqError(
                f"cannot write {out}: it {relation} {given}, which this command reads (an input); write elsewhere."
            )


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An ``OSError`` of the block names ``path`` (what the user asked to write), not a temporary file or folder,
    nor nothing (a write that finds the disk full names no file)."""
    try:
        yield
    except OSError as e:
        if e.filename is not None and str(e.filename) == str(path):
            raise
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None  # the errno keeps its subclass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def readable(folder: Path) -> None:
    """Give each file under ``folder`` the mode a new file gets here (0666 less the umask), as
    :func:`atomic_write` does: some writers (safetensors) make theirs 0600, unreadable to a service's user."""
    mode = 0o666 & ~_umask()
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(mode)


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


@contextmanager
def new_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """A hidden sibling folder to fill, renamed into place as ``folder`` when the block ends.

    If the block raises, the sibling is deleted and ``folder`` is left as it was; if the process is killed, the sibling
    (``.NAME.building-PID``) is what :func:`remove_stale` deletes next time. An existing ``folder`` is replaced: moved
    aside, the new one renamed in, the old one deleted (a kill between the two renames leaves it as ``.NAME.old-PID``).

    >>> with new_folder("runs/model") as tmp:                                  # doctest: +SKIP
    ...     write_json(tmp / "config.json", config)
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    check_target(folder, folder=True)
    remove_stale(folder.parent)  # builds killed before their rename
    tmp = folder.parent / f".{folder.name}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with _naming(folder):
        tmp.mkdir()
    try:
        with _inside(tmp, folder):
            yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = folder.parent / f".{folder.name}.old-{os.getpid()}"
    with _naming(folder):
        if folder.exists():
            folder.rename(old)
        try:
            tmp.rename(folder)
        except BaseException:
            if old.exists():
                old.rename(folder)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    shutil.rmtree(old, ignore_errors=True)
    fsync_dir(folder.parent)


@contextmanager
def _inside(tmp: Path, folder: Path) -> Iterator[None]:
    """An ``OSError`` about a file in the hidden folder ``tmp`` names the same file in ``folder``, where the user will look."""
    try:
        yield
    except OSError as e:
        name = str(e.filename) if e.filename is not None else str(tmp)  # a write that names no file: the folder's
        if not name.startswith(str(tmp)):
            raise
        raise OSError(e.errno, e.strerror or str(e), str(folder) + name[len(str(tmp)) :]) from None


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as indented UTF-8 JSON."""
    atomic_write(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Read a JSON file, turning a missing or malformed file into one clear :class:`DupqError`.

    The one reader of every JSON file dupq reads (a model's ``config.json``, ``metrics.json`` and
    ``vocab.json``, a collection's ``manifest.json``, a teacher's ``teacher.json``): see :func:`parse_json`.
    """
    path = Path(path)
    if not path.is_file():
        raise DupqError(f"{what} is missing: {path} does not exist.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DupqError(f"{what} is corrupt: {path} is not valid JSON ({e}).") from None
    return parse_json(text, what, path)


def parse_json(text: str | bytes, what: str, where: str | os.PathLike) -> Any:
    """``text`` (JSON read from ``where``) parsed, or one :class:`DupqError` sentence.

    Text nested deeper than :data:`~dupq.core.nesting.MAX_FILE_DEPTH` levels is refused before it is
    parsed: Python's parser recurses once per level, and 1,000 brackets end in ``RecursionError``.
    """
    if json_depth(text, MAX_FILE_DEPTH) > MAX_FILE_DEPTH:
        raise DupqError(f"{what} is corrupt: {where} nests more than {MAX_FILE_DEPTH} levels deep.")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DupqError(f"{what} is corrupt: {where} is not valid JSON ({e}).") from None


def check_new_folder(folder: str | os.PathLike, overwrite: bool | None = False) -> Path:
    """``folder`` if a command may write it: the rule of every command that writes a folder.

    A folder that does not exist yet, or is empty, is fine; one that holds anything is refused unless ``overwrite`` (the
    command's ``--overwrite``; ``None``: the command has no such option and never replaces a folder); a file is refused.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise DupqError(f"cannot write the folder {folder}: it is a file; name a folder.")
    if overwrite or not folder.is_dir() or not any(folder.iterdir()):
        return folder
    if overwrite is None:
        raise DupqError(f"{folder} already exists and is not empty; choose a new folder.")
    raise DupqError(
        f"{folder} already exists and is not empty; pass --overwrite to replace it or choose another folder."
    )


def to_json(obj: Any, **kwargs) -> str:
    """``json.dumps`` that never writes ``NaN`` or ``Infinity`` (not JSON): a non-finite number becomes null."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def check_path(path: str | os.PathLike, what: str, *, folder: bool) -> Path:
    """``path`` if it is an existing folder (``folder=True``) or file, else one sentence saying what it is instead."""
    path = Path(path)
    if not path.exists():
        raise DupqError(f"{what} {path} does not exist.")
    if folder and not path.is_dir():
        raise DupqError(f"{what} {path} is a file, not a folder.")
    if not folder and path.is_dir():
        raise DupqError(f"{what} {path} is a folder, not a file.")
    return path


_TEMP = re.compile(r"^\..+\.(\d+)-[^.]+\.tmp$")  # atomic_write's temporary files: .NAME.PID-RANDOM.tmp
_OLD_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # the same before they held a process id
_BUILDING = re.compile(r"^\..+\.building-(\d+)$")  # a collection being built (dupq.collection.collection)


def alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (this one, or another user's): a file it left is not stale."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def remove_stale(folder: str | os.PathLike, old: float = 3600.0) -> list[Path]:
    """Delete the temporary files and unfinished builds in ``folder`` whose writer is dead (killed mid-write).

    Those of a process still running are kept; a temporary file without a process id in its name
    is deleted once it is ``old`` seconds old. Returns what was removed.
    """
    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    for entry in entries:
        temp, building, legacy = _TEMP.match(entry.name), _BUILDING.match(entry.name), _OLD_TEMP.match(entry.name)
        try:
            if temp and entry.is_file() and not alive(int(temp.group(1))):
                entry.unlink()
            elif building and entry.is_dir() and not alive(int(building.group(1))):
                shutil.rmtree(entry)
            elif legacy and not temp and entry.is_file() and time.time() - entry.stat().st_mtime > old:
                entry.unlink()
            else:
                continue
        except OSError:
            continue
        removed.append(entry)
    return removed


@contextmanager
def file_lock(path: str | os.PathLike, timeout: float | None = None) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing) across processes, for as long as the ``with`` lasts.

    Without ``timeout`` a waiter sleeps in the kernel until the lock is released (or its holder dies); with one it tries
    every millisecond and raises :class:`TimeoutError` after ``timeout`` seconds. Either way it takes the lock within a
    millisecond of its release, where SQLite's own busy handler sleeps up to 100 ms between tries. Raises
    :class:`OSError` when ``path`` cannot be opened (a read-only folder).
    """
    import fcntl

    with open(path, "a") as f:
        if timeout is None:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed, or when the process dies
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{path} stayed locked for {timeout:g} s") from None
                    time.sleep(0.001)
        yield
