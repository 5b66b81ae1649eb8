"""What the library's tile benches (bench_dgrad.py, bench_wgrad.py) share: a row's
configurations built through BOO in parallel, each substituted into the module its plan
names and verified against float64 PyTorch, then timed one by one."""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from boo_kernels_hopper import hooks  # noqa: E402
from gpu import device_us  # noqa: E402

from boo_core import get_launchable  # noqa: E402
from boo_core.plugin import Substitution  # noqa: E402

DEVICE = "cuda:0"


def substituted(signature: Any, name: str, key: Sequence[object], plan: Callable[[Sequence[Any]], list[Any]],
                generate: Callable[[Any, str], Any], prefix: str, formulation: str) -> Any:
    """BOO's kernel for ``signature`` with ``plan``'s launches (their objects named after
    ``prefix``) substituted, as substitution ``name`` keyed by ``key``, into
    ``formulation``'s module, verified; or, as text, why not."""
    build = hooks._build_launches(plan, generate, prefix)
    substitution = Substitution(name, build=build, key=hooks._key(name, *key), formulation=formulation)
    try:
        kernel = get_launchable(signature, DEVICE, substitutions=substitution)  # on the formulation it names
    except Exception as e:  # noqa: BLE001 - a configuration that does not build is reported, not fatal
        return f"{type(e).__name__}: {str(e)[:80]}"
    return kernel if kernel.verified and kernel.substitution is not None else "not verified"


def build_all(rows: list[tuple[str, Any, list[Hashable]]], make: Callable[[Any, Hashable], Any]
              ) -> dict[tuple[Any, Hashable], Any]:
    """``make(signature, config)`` for every row's configurations, 16 at a time (compiling
    and verifying), keyed by (signature, config)."""
    jobs = [(signature, config) for _, signature, configs in rows for config in configs]
    with ThreadPoolExecutor(16) as pool:
        return dict(zip(jobs, pool.map(lambda job: make(*job), jobs)))


def timed(kernels: dict[Hashable, Any], inputs: Sequence[Any]) -> list[tuple[float, Hashable]]:
    """(device µs per call, config) of each built kernel, fastest first; one that did not
    build or verify last, at infinity."""
    return sorted(((float("inf") if isinstance(kernel, str) else device_us(kernel, inputs), config)
                   for config, kernel in kernels.items()), key=lambda timing: timing[0])


def print_failures(kernels: dict[Hashable, Any]) -> None:
    for config, kernel in kernels.items():
        if isinstance(kernel, str):
            print(f"  {config}: {kernel}")
