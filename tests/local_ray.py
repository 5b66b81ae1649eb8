"""A real Ray cluster on this machine for tests: a head node and worker nodes, each a
``ray start`` of its own (own process group), on 127.0.0.1, stopped by killing exactly
those process groups (never ``ray stop``, which would stop every Ray on the machine).

Ray's token authentication is off on these nodes (``RAY_AUTH_MODE=disabled``): a process
joins them whatever its own mode (one that sends a token is accepted too; a process cannot
change its mode once it has imported Ray), and no ``~/.ray/auth_token`` is read or
written. The nodes live for one test module, on this machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class LocalRayCluster:
    """Nodes started with ``ray start``; ``address`` is the head's ``HOST:PORT``."""

    env: dict[str, str]
    temp_dir: Path
    auth: dict[str, str] = field(default_factory=dict)  # Ray's authentication settings of the nodes
    address: str = ""
    groups: list[int] = field(default_factory=list)  # process group of each node, head first

    def start_head(self, cpus: int = 1) -> None:
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        self._start("--head", f"--port={port}", f"--temp-dir={self.temp_dir}", "--include-dashboard=false",
                    "--dashboard-port=0", cpus=cpus)

    def add_node(self, cpus: int = 1, gpus: int = 0) -> int:
        """Start one more node; its process group (what :meth:`kill_node` takes)."""
        return self._start(f"--address={self.address}", *([f"--num-gpus={gpus}"] if gpus else []), cpus=cpus)

    def _start(self, *arguments: str, cpus: int) -> int:
        command = [RAY, "start", *arguments, "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}",
                   "--object-store-memory=100000000", "--disable-usage-stats"]
        process = subprocess.Popen(command, env=self.env, start_new_session=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        self.groups.append(process.pid)  # the daemons it leaves running keep its process group
        output, _ = process.communicate(timeout=180)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{output[-3000:]}")
        return process.pid

    def kill_node(self, group: int) -> None:
        _kill_group(group)
        self.groups.remove(group)

    def stop(self) -> None:
        for group in reversed(self.groups):
            _kill_group(group)
        self.groups.clear()


@contextlib.contextmanager
def local_ray_cluster(nodes: int = 2, *, gpus_on_last: int = 0,
                      env: Mapping[str, str] | None = None) -> Iterator[LocalRayCluster]:
    """A head and ``nodes - 1`` more nodes of one CPU each (the last also with
    ``gpus_on_last`` GPUs, as Ray counts them: a label, no device needed)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="boo-ray-", dir="/tmp"))  # Ray's socket paths must stay short
    auth = {"RAY_AUTH_MODE": "disabled"}
    cluster = LocalRayCluster({**os.environ, **(env or {}), **auth}, temp_dir, auth)
    try:
        cluster.start_head()
        for index in range(1, nodes):
            cluster.add_node(gpus=gpus_on_last if index == nodes - 1 else 0)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(group: int, grace: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
