"""A Ray cluster on this machine's loopback address, for the tests of `dupq dedup --ray`.

``ray start --head`` runs in a temporary folder of its own; afterwards every process whose command
line names that folder is stopped, so nothing of another cluster on the machine is touched.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.serving import free_port

ENV = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # the cluster on 127.0.0.1, as the driver expects
FOLDERS: dict[str, str] = {}  # address -> the temporary folder of each cluster started here


def started_in(folder: str) -> list[int]:
    """The processes whose command line names ``folder``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and folder.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@contextmanager
def local_cluster(cpus: int = 2) -> Iterator[str]:
    """A head node on 127.0.0.1 with ``cpus`` CPUs, as its address ``127.0.0.1:PORT``; stopped on exit."""
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = free_port()
    subprocess.run(
        [Path(sys.executable).with_name("ray"), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={cpus}", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={folder}"],
        env=ENV, check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    FOLDERS[address] = folder
    try:
        yield address
    finally:
        if "ray" in sys.modules:  # this process connected as a driver
            sys.modules["ray"].shutdown()
        kill(address)
        FOLDERS.pop(address)
        shutil.rmtree(folder, ignore_errors=True)


def kill(address: str, signals=(signal.SIGTERM, signal.SIGKILL)) -> None:
    """Stop every process of the cluster at ``address`` that :func:`local_cluster` started (a cluster that dies)."""
    for sig in signals:
        for pid in started_in(FOLDERS[address]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(2)


def same_group_pairs(path: Path) -> set[tuple[str, str]]:
    """The pairs of keys that a `dupq dedup` groups file puts in one group."""
    groups: dict[str, list[str]] = {}
    for row in csv.DictReader(path.open()):
        groups.setdefault(row["cluster"], []).append(row["key"])
    return {(a, b) for g in groups.values() for a in g for b in g if a < b}
