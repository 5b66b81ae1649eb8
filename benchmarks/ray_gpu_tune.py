"""``boo tune --ray`` and ``boo preload --ray`` with GPU tasks on a real Ray cluster of this
machine: one node with every GPU, started here, against a local tune of the same commands.

    python benchmarks/ray_gpu_tune.py [--commands-file F] [--iter 50] [--kill-one]

Steps: start a Ray head (``ray start --head``, every GPU of the machine); tune the commands
locally on ``cuda:0`` into one cache; tune them again with ``--ray`` into another (one GPU
task per kernel; ``--kill-one`` SIGKILLs the first GPU task's worker as it runs, which Ray
retries); preload them with ``--ray`` into a third (GPU tasks verify). Prints, per kernel,
both winners and their times, then where the GPU tasks ran (``boo tune``'s ``Ray:`` line),
and stops the cluster.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

COMMANDS = """\
gemmbfp16 -m 6304 -n 768 -k 768
gemmbfp16 -m 6304 -n 3072 -k 768
layernormbfp16 -X 6304x768 -o 1 -m 1 -F 1
convbfp16 -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1 --in_layout NHWC --fil_layout NHWC --out_layout NHWC
convbfp16 -n 32 -c 256 -H 56 -W 56 -k 64 -y 1 -x 1 -F 1 --in_layout NHWC --fil_layout NHWC --out_layout NHWC
"""
BOO = [sys.executable, "-m", "boo_core.tools.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_first_gpu_task(stop: threading.Event, killed: list[str]) -> None:
    """SIGKILL the first worker seen running a tune's GPU task (Ray names it ``ray::tune ...``)."""
    while not stop.is_set() and not killed:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if title.startswith("ray::tune "):
                time.sleep(1.0)  # mid-task: its kernels loaded, some candidates timed
                os.kill(int(pid), signal.SIGKILL)
                killed.append(f"{pid} ({title.strip()[:80]})")
                return
        time.sleep(0.2)


def winners(path: Path) -> dict[str, tuple[str, float]]:
    with path.open() as f:
        return {row["func_name"]: (row["candidate"], float(row["time_us"] or "nan"))
                for row in csv.DictReader(f) if row["winner"] == "1"}


def boo(arguments: list[str], env: dict[str, str], log: Path) -> str:
    done = subprocess.run(BOO + arguments, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(done.stdout)
    if done.returncode:
        raise SystemExit(f"boo {' '.join(arguments)} exited with {done.returncode}:\n{done.stdout[-4000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands-file", type=Path)
    parser.add_argument("--iter", default="50")
    parser.add_argument("--kill-one", action="store_true", help="kill the first GPU task's worker mid-run")
    parser.add_argument("--work", type=Path, default=None, help="where caches, CSVs and logs go")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="boo-ray-tune-"))
    work.mkdir(parents=True, exist_ok=True)
    commands = args.commands_file or work / "commands.txt"
    if args.commands_file is None:
        commands.write_text(COMMANDS)
    gpus = torch.cuda.device_count()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env = {k: v for k, v in env.items() if not k.startswith("BOO_")}
    port = free_port()
    address = f"127.0.0.1:{port}"
    ray_tmp = Path(tempfile.mkdtemp(prefix="boo-ray-", dir="/tmp"))
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
                    f"--num-gpus={gpus}", f"--num-cpus={os.cpu_count()}", "--node-ip-address=127.0.0.1",
                    "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={ray_tmp}"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        start = time.perf_counter()
        boo(["tune", "--device", "cuda:0", "--cache-dir", str(work / "local"), "--iter", args.iter,
             "--commands-file", str(commands), "--csv", str(work / "local.csv")], env, work / "local.log")
        local_s = time.perf_counter() - start
        stop, killed = threading.Event(), []
        killer = threading.Thread(target=kill_first_gpu_task, args=(stop, killed), daemon=True)
        if args.kill_one:
            killer.start()
        start = time.perf_counter()
        out = boo(["tune", "--device", "cuda:0", "--ray", address, "--cache-dir", str(work / "ray"), "--iter",
                   args.iter, "--commands-file", str(commands), "--csv", str(work / "ray.csv")], env,
                  work / "ray.log")
        ray_s = time.perf_counter() - start
        stop.set()
        preload = boo(["preload", "--device", "cuda:0", "--ray", address, "--cache-dir", str(work / "preload"),
                       "--commands-file", str(commands)], env, work / "preload.log")
    finally:
        subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    local, remote = winners(work / "local.csv"), winners(work / "ray.csv")
    print(f"{torch.cuda.get_device_name()} x{gpus}; local tune {local_s:.0f} s, Ray tune {ray_s:.0f} s")
    print("| kernel | local winner | us | Ray winner | us | same |")
    print("| --- | --- | ---: | --- | ---: | --- |")
    for name in sorted(set(local) | set(remote)):
        (lw, lt), (rw, rt) = local.get(name, ("-", float("nan"))), remote.get(name, ("-", float("nan")))
        print(f"| {name[:60]} | {lw} | {lt:.1f} | {rw} | {rt:.1f} | {'yes' if lw == rw else 'NO'} |")
    print(next((line for line in out.splitlines() if line.startswith("Ray: ") and "GPU task" in line),
               "Ray: (no GPU task summary)"))
    print(f"killed mid-run: {killed[0] if killed else 'none'}")
    print("preload:", " | ".join(line for line in preload.splitlines()[-3:]))


if __name__ == "__main__":
    main()
