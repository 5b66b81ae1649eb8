"""Verification verdicts: each kernel is checked once per device model against PyTorch, and
the verdict is kept beside the kernel in its cache entry (``verdicts.json``: device model ->
the verdict sealed under the cache's integrity key, for that entry and that device model),
written under the entry's lock, so the check is paid once per kernel per kind of device,
across processes and machines sharing a cache: :func:`verdict_of` checks under a lock of its
own per entry, so processes that want one verdict at once (the ranks of a distributed job,
each on a GPU of one model) wait for the first one's instead of checking again.

A verdict whose seal does not match (written by hand, by another user, or copied from
another entry) is not read: the kernel is checked again, so no one who can write the cache
can turn a failed verdict into a pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import describe_error, is_plugins_failure
from ..kernels import activity, owned
from ..kernels.cache import VERDICTS_FILE, entry_lock, read_json_object
from ..kernels.integrity import integrity_key, read_only, seal, unseal
from ..kernels.locks import EntryLocked
from ..kernels.target import host_cpu_fingerprint
from .numerics import check_launchable

logger = logging.getLogger(__name__)

__all__ = ["PASS", "VERDICTS_FILE", "check", "check_and_record", "device_identity", "read_verdict",
           "record_checked", "record_verdict", "seal_verdict", "verdict_of"]

PASS = "pass"
#: Checks, each on fresh random inputs, a kernel must pass: generated code with a race can
#: be right on one call and wrong on the next (docs/gpu.md), and one check may miss it.
CHECKS = 2


def check(launchable: Any, checks: int = CHECKS) -> str:
    """``pass``, or ``fail: ...`` with what was wrong: ``launchable`` run ``checks`` times on
    fresh random inputs into NaN-poisoned outputs, against float64 PyTorch."""
    for _ in range(checks):
        try:
            comparisons = check_launchable(launchable)
        except BaseException as e:  # a kernel that crashes when run is as wrong as one that computes wrong
            if not is_plugins_failure(e):  # a Ctrl-C is the user's; sys.exit() the plugin's
                raise
            return f"fail: running it raised {describe_error(e)}"
        failed = [c for c in comparisons if not c.passed]
        if failed:
            return "fail: " + "; ".join(str(c) for c in failed)
    return PASS


def device_identity(torch_device: torch.device) -> str:
    """What a verdict is about: the concrete device model (kernels are shared by a target)."""
    if torch_device.type == "cuda":
        index = torch_device.index or 0
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda {torch.cuda.get_device_name(index)} sm_{major}{minor}"
    return f"cpu {host_cpu_fingerprint()}"


def _purpose(directory: Path, device: str) -> str:
    return f"verdict {directory.name} {device}"


def read_verdict(directory: Path | None, torch_device: torch.device) -> str | None:
    """The recorded verdict for this kernel on this device model, or None (none, or not
    sealed by this cache)."""
    if directory is None:
        return None
    device = device_identity(torch_device)
    sealed = (read_json_object(directory / VERDICTS_FILE) or {}).get(device)
    if sealed is None:
        return None
    found = unseal(integrity_key(directory.parent), _purpose(directory, device), sealed)
    verdict = found.get("verdict") if found is not None else None
    if not isinstance(verdict, str):
        logger.warning("cache entry %s: its verdict for %s is not sealed by this cache's key; the kernel is "
                       "verified again", directory.name, device)
        return None
    return verdict


def seal_verdict(directory: Path, device: str, verdict: str) -> dict[str, str]:
    """``verdict`` for ``device`` sealed for the entry at ``directory`` (the cache's key is
    made if it has none yet)."""
    secret = integrity_key(directory.parent, create=True)
    return seal(secret or b"", _purpose(directory, device), {"verdict": verdict})


def record_verdict(directory: Path | None, torch_device: torch.device, verdict: str) -> None:
    """Keep ``verdict`` for this kernel on this device model (under the entry's lock).
    A cache that cannot be written keeps nothing: the next process checks again."""
    if directory is None or read_only():  # no cache, or a shared one this process only reads
        return
    device = device_identity(torch_device)
    try:
        with entry_lock(directory.parent, directory.name):
            if (directory / VERDICTS_FILE).is_dir():
                owned.remove_tree(directory.parent, directory / VERDICTS_FILE)  # damage: BOO's own file's place
            verdicts = read_json_object(directory / VERDICTS_FILE) or {}
            verdicts[device] = seal_verdict(directory, device, verdict)
            text = json.dumps(verdicts, indent=2, sort_keys=True) + "\n"
            owned.write(directory.parent, directory / VERDICTS_FILE, text)
    except OSError as e:
        logger.warning("could not record the verdict of %s: %s", directory.name, e)


def verdict_of(launchable: Any, checker: Callable[[Any], str] = check) -> str:
    """The verdict recorded for ``launchable``'s kernel on its device model, or a new one,
    checked (by ``checker``: :func:`check`, or the worker process's) and recorded by one
    process at a time (module docstring): a process that finds another checking the same
    kernel waits for it and reads its verdict."""
    directory, torch_device = launchable.cache_directory, launchable.device.torch_device
    verdict = read_verdict(directory, torch_device)
    if verdict is not None:
        activity.count("verdict read")
        return verdict
    if directory is None or read_only():  # nothing to share it through
        return check_and_record(launchable, checker)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(entry_lock(directory.parent, f"{directory.name}.verify"))
        except EntryLocked:  # the process checking it is stopped or hung: check it here
            pass
        except OSError as e:  # the lock cannot be made (CacheUnwritable among them): check without it
            logger.info("verifying %s without its lock: %s", directory.name, e)
        else:
            verdict = read_verdict(directory, torch_device)  # another process's, checked while this one waited
            if verdict is not None:
                activity.count("verdict waited")
                return verdict
        return check_and_record(launchable, checker)


def check_and_record(launchable: Any, checker: Callable[[Any], str] = check) -> str:
    """Check ``launchable`` now (with ``checker``: :func:`check`, or the worker process's),
    whatever is recorded, and record the verdict for its device model."""
    start = time.perf_counter()
    verdict = checker(launchable)
    record_checked(launchable, verdict, time.perf_counter() - start)
    return verdict


def record_checked(launchable: Any, verdict: str, seconds: float) -> None:
    """Count and record ``verdict``, just checked in ``seconds``, for ``launchable``'s
    kernel on its device model."""
    directory, torch_device = launchable.cache_directory, launchable.device.torch_device
    activity.count("verdict checked", seconds)
    record_verdict(directory, torch_device, verdict)
    logger.info("%s (%s) verified on %s: %s", launchable.signature.func_name, launchable.formulation,
                device_identity(torch_device), verdict)
