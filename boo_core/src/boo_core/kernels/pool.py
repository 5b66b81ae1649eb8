"""Processes that compile kernels side by side (``boo preload -j``, ``boo tune``'s compiles)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from concurrent.futures import Executor, ProcessPoolExecutor

import torch

from ..settings import Settings, get_settings, use_settings

__all__ = ["compile_pool", "fills_the_cores", "worker_settings"]


def compile_pool(workers: int) -> Executor:
    """Worker processes: forked where that is safe, spawned otherwise.

    Forked workers start at once and inherit this process's registry (plugins registered
    explicitly included) and settings. A child forked after the parent initialized CUDA
    cannot use CUDA (which exporting may touch), and some platforms cannot fork: then
    workers are spawned and load the installed plugins afresh. Either way they get this
    process's settings, with :func:`worker_settings`' threading.
    """
    settings = worker_settings(get_settings(), workers)
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and not torch.cuda.is_initialized() \
        else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                               initializer=use_settings, initargs=(settings,))


def worker_settings(settings: Settings, workers: int) -> Settings:
    """``settings`` for each of ``workers`` compiling side by side: where they occupy every
    core this process may use, each iree-compile runs on one thread: its own threads would
    only contend (2 cores, two compiles at a time of 20 kernels each: 10.7-11.2 s against
    11.7-16.2 s threaded, three runs each)."""
    return dataclasses.replace(settings, compile_threading=False) if fills_the_cores(workers) else settings


def fills_the_cores(processes: int) -> bool:
    """Whether ``processes`` working at once occupy every core this process may run on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return processes >= cores
