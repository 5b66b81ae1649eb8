"""Processes that compile kernels side by side (``boo preload -j``, ``boo tune``'s compiles)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Executor, ProcessPoolExecutor

import torch

from ..settings import get_settings, use_settings

__all__ = ["compile_pool"]


def compile_pool(workers: int) -> Executor:
    """Worker processes: forked where that is safe, spawned otherwise.

    Forked workers start at once and inherit this process's registry (plugins registered
    explicitly included) and settings. A child forked after the parent initialized CUDA
    cannot use CUDA (which exporting may touch), and some platforms cannot fork: then
    workers are spawned, load the installed plugins afresh and get this process's settings.
    """
    if "fork" in multiprocessing.get_all_start_methods() and not torch.cuda.is_initialized():
        return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=use_settings, initargs=(get_settings(),))
