"""The core's own guarantees: hook tracing, compile and lock timeouts, one settings registry."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import logging
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import boo_core
from boo_core import CompileError, get_launchable
from boo_core.kernels import cache
from boo_core.kernels import compiler as compiler_module
from boo_core.settings import SETTINGS, SettingError, Settings, configure, markdown_table, settings_override
from boo_core.testing import isolated_registry

from ..conftest import REPO
from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature


def test_boo_trace_hooks_logs_every_hook_call(boo_env, caplog):
    boo_env(BOO_TRACE_HOOKS="1")
    with caplog.at_level(logging.DEBUG, logger="boo_core.plugins"):
        with isolated_registry({"scale": scale_op}) as registry:
            assert registry.get_op("scale")
    traced = [r.getMessage() for r in caplog.records if r.name == "boo_core.plugins"]
    assert any(m.startswith("hook: boo_register_ops") for m in traced), traced
    assert any("finish boo_register_ops" in m for m in traced)


def test_without_boo_trace_hooks_nothing_is_traced(caplog):
    with caplog.at_level(logging.DEBUG, logger="boo_core.plugins"):
        with isolated_registry({"scale": scale_op}):
            pass
    assert not [r for r in caplog.records if r.name == "boo_core.plugins" and r.getMessage().startswith("hook:")]


def test_a_hung_compiler_is_stopped_with_a_clear_error(private_cache, tmp_path, monkeypatch):
    hung = tmp_path / "iree-compile"
    hung.write_text("#!/bin/sh\nsleep 60\n")
    hung.chmod(hung.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(compiler_module, "_iree_compile_path", lambda: str(hung))
    start = time.monotonic()
    with isolated_registry({"scale": scale_op}), settings_override(compile_timeout=1):
        with pytest.raises(CompileError, match=r"iree-compile did not finish within 1 s \(BOO_COMPILE_TIMEOUT\) "
                                               r"and was stopped"):
            get_launchable(ScaleSignature(21), formulation="default")
    assert time.monotonic() - start < 20
    # A timeout says nothing about the key: it is not recorded as a compile failure.
    [entry] = cache.entry_directories(private_cache)
    assert not (entry / cache.FAILED_FILE).exists()


HOLD_LOCK = """
import sys, time, pathlib
from boo_core.kernels.cache import entry_lock
with entry_lock(pathlib.Path(sys.argv[1]), sys.argv[2], timeout=5):
    print("locked", flush=True)
    time.sleep(30)
"""


def test_waiting_for_another_process_s_lock_times_out_naming_the_lock(private_cache):
    with isolated_registry({"scale": scale_op}):
        from boo_core.kernels.request import KernelRequest
        from boo_core.kernels.target import Target

        request = KernelRequest.create(ScaleSignature(22), Target.parse("cpu"))
        holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(private_cache), request.key.dirname],
                                  stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert holder.stdout.readline().strip() == "locked"
            with settings_override(lock_timeout=0.5):
                with pytest.raises(cache.CacheError, match=rf"waited 0 s for the lock of cache entry "
                                                           rf"{request.key.dirname} .*BOO_LOCK_TIMEOUT"):
                    request.fetch()
        finally:
            holder.kill()
            holder.wait()


def test_every_setting_has_a_field_an_environment_variable_and_configure_sets_it(boo_env):
    fields = {f.name for f in dataclasses.fields(Settings)}
    assert fields == {s.name for s in SETTINGS}
    assert len({s.env for s in SETTINGS}) == len(SETTINGS) and all(s.env.startswith("BOO_") for s in SETTINGS)
    values = {"BOO_CACHE_ON": "0", "BOO_CACHE_DIR": "/tmp/x", "BOO_EXTRA_COMPILE_FLAGS": "--a '--b c'",
              "BOO_TUNING_SPEC_PATH": "/tmp/spec.mlir", "BOO_COMPILE_TIMEOUT": "5", "BOO_LOCK_TIMEOUT": "7",
              "BOO_CPU_DRIVER": "local-sync", "BOO_CUDA_TARGET": "sm_89", "BOO_CUDA_LAUNCH": "iree",
              "BOO_USE_BACKWARD_KERNELS": "1",
              "BOO_VERIFY": "0", "BOO_USE_TUNED": "0", "BOO_COMPILE_STRICT": "1", "BOO_STRICT_PLUGINS": "1",
              "BOO_DISABLE_PLUGIN_AUTOLOAD": "1", "BOO_DISABLE_PLUGINS": "a,b", "BOO_TRACE_HOOKS": "1",
              "BOO_SUBSTITUTIONS": "/tmp/substitutions"}
    assert set(values) == {s.env for s in SETTINGS}
    from_env = boo_env(**values)
    defaults = Settings()
    for setting in SETTINGS:
        assert getattr(from_env, setting.name) != getattr(defaults, setting.name), setting.env
        # configure() can set every one of them, to the value the environment gave.
        with settings_override(**{setting.name: getattr(defaults, setting.name)}):
            assert getattr(boo_core.get_settings(), setting.name) == getattr(defaults, setting.name)
    assert from_env.extra_compile_flags == ("--a", "--b c") and from_env.disabled_plugins == {"a", "b"}
    assert configure(verify=True).verify == "all"


@pytest.mark.parametrize("variable, value, message", [
    ("BOO_CACHE_ON", "maybe", r"BOO_CACHE_ON='maybe': expected 0 or 1"),
    ("BOO_VERIFY", "sometimes", r"BOO_VERIFY='sometimes': expected auto, 1 or 0"),
    ("BOO_COMPILE_TIMEOUT", "-3", r"BOO_COMPILE_TIMEOUT='-3': expected a positive number of seconds"),
    ("BOO_CPU_DRIVER", "cuda", r"BOO_CPU_DRIVER='cuda': expected one of auto, local-sync, local-task"),
    ("BOO_CUDA_LAUNCH", "async", r"BOO_CUDA_LAUNCH='async': expected one of direct, iree"),
])
def test_a_bad_setting_is_an_error_naming_the_variable(boo_env, variable, value, message):
    with pytest.raises(SettingError, match=message):
        boo_env(**{variable: value})


def test_configure_refuses_unknown_names():
    with pytest.raises(TypeError, match=r"configure\(\) got unknown settings \['cache'\]"):
        configure(cache=True)


def test_the_readme_settings_table_is_the_registry_s():
    readme = (REPO / "README.md").read_text()
    assert markdown_table() in readme


@pytest.mark.parametrize("package", ["boo_ops_conv", "boo_ops_matmul", "boo_ops_layernorm", "boo_ops_softmax"])
def test_op_packages_have_no_import_cycles(package):
    """Module-level imports between a package's own modules form no cycle (the signature
    module no longer imports its parser to write commands)."""
    root = Path(importlib.import_module(package).__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        imported = set()
        for node in ast.parse(path.read_text()).body:  # module level only: lazy imports are not cycles
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported |= {node.module} if node.module else {a.name for a in node.names}
        graph[path.stem] = {name for name in imported if (root / f"{name}.py").exists()}
    assert "parser" not in graph["signature"]

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, f"import cycle: {' -> '.join((*stack, module))}"
        for imported in graph.get(module, ()):
            visit(imported, (*stack, module))

    for module in graph:
        visit(module, ())
