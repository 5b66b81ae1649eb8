"""Shared test setup: a private kernel cache, GPU skipping, and registry helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import boo_core
from boo_core import BooOpRegistry

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def pytest_configure(config: pytest.Config) -> None:
    # boo-core's pytest plugin gives the session its own kernel cache; these tests also need
    # the plugin switches and extra flags at their defaults.
    for name in ("BOO_STRICT_PLUGINS", "BOO_DISABLE_PLUGIN_AUTOLOAD", "BOO_DISABLE_PLUGINS", "BOO_LOAD_PLUGINS",
                 "BOO_EXTRA_COMPILE_FLAGS", "BOO_VERIFY", "BOO_TUNING_SPEC_PATH", "BOO_USE_TUNED",
                 "BOO_SUBSTITUTIONS"):
        os.environ.pop(name, None)
    boo_core.settings.reload_from_environment()


#: Seconds each test file of 8 s or more took in a fresh-clone CI run on two cores (at
#: `8a920c7`, `--durations=0` summed by file; test_cli.py's and test_kernel_marker.py's lowered at
#: `02f0ac1`, after their tests shrank). pytest-xdist hands out whole files (``--dist
#: loadfile``) in collection order, and integration tests are collected last: a heavy file
#: handed out last keeps one worker busy while the other idles. So files run longest first
#: (the others after them, in their order), which leaves the small ones to even out the end.
HEAVY_FILES = {
    "tests/integration/test_models.py": 112, "tests/integration/test_cli.py": 88,
    "tests/boo_core/test_cluster.py": 93, "tests/boo_ops_conv/test_formulations.py": 70,
    "tests/boo_ops_conv/test_numerics.py": 69, "tests/integration/test_torch_compile.py": 55,
    "tests/boo_core/test_kernel_marker.py": 30, "tests/boo_ops_conv/test_modules.py": 53,
    "tests/boo_core/test_cache_kill.py": 52, "tests/boo_ops_conv/test_corpus.py": 50,
    "tests/integration/test_fuzz_commands.py": 43, "tests/integration/test_softmax_example.py": 41,
    "tests/boo_core/test_tune.py": 36, "tests/boo_core/test_worker.py": 29, "tests/boo_ops_matmul/test_eager.py": 29,
    "tests/integration/test_install.py": 27, "tests/boo_ops_batchnorm/test_eager.py": 23,
    "tests/integration/test_runtime_only.py": 22, "tests/integration/test_ddp.py": 19,
    "tests/boo_core/test_plugin_faults.py": 19, "tests/boo_core/test_cache.py": 19,
    "tests/integration/test_kernel_library.py": 19, "tests/boo_ops_batchnorm/test_fusion.py": 19,
    "tests/boo_core/test_launch_plan.py": 18, "tests/boo_ops_conv/test_cbainfer.py": 16,
    "tests/boo_ops_batchnorm/test_numerics.py": 16, "tests/boo_core/test_preload.py": 15,
    "tests/boo_ops_layernorm/test_numerics.py": 15, "tests/boo_ops_batchnorm/test_folding.py": 13,
    "tests/integration/test_bound_nodes.py": 13, "tests/integration/test_odd_tensors.py": 12,
    "tests/boo_ops_matmul/test_numerics.py": 11, "tests/boo_core/test_core_contract.py": 11,
    "tests/boo_core/test_substitute.py": 10, "tests/integration/test_report_browser.py": 9,
    "tests/integration/test_numerics_extremes.py": 8,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: -HEAVY_FILES.get(item.nodeid.partition("::")[0], 0))  # stable: files stay whole
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_default_registry():
    """Forget the process-wide registry before and after the test (it rescans lazily)."""
    previous = BooOpRegistry.reset()
    yield
    BooOpRegistry.reset(previous)


@pytest.fixture
def private_cache(boo_cache):
    """A kernel cache of the test's own (boo-core's pytest plugin), no launchables in memory."""
    return boo_cache


@pytest.fixture
def boo_env(monkeypatch):
    """``boo_env(NAME=value, ...)``: set BOO_* environment variables and re-read the settings
    (restored after the test)."""

    def set_env(**variables: str) -> boo_core.Settings:
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        return boo_core.settings.reload_from_environment()

    yield set_env
    monkeypatch.undo()
    boo_core.settings.reload_from_environment()
