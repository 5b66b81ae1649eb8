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
import torch

import boo_core
from boo_core import BooOpRegistry, CompileError, get_launchable
from boo_core.kernels import cache
from boo_core.kernels import compiler as compiler_module
from boo_core.settings import SETTINGS, SettingError, Settings, configure, markdown_table, settings_override
from boo_core.testing import isolated_registry

from ..conftest import REPO
from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature

#: A user name no machine has (``~NAME`` cannot be expanded).
NO_SUCH_USER = "boo-no-such-user-7f3a"


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
    monkeypatch.setattr(compiler_module, "iree_compile_path", lambda: str(hung))
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
import os, signal, sys, time, pathlib
from boo_core.kernels.cache import entry_lock
with entry_lock(pathlib.Path(sys.argv[1]), sys.argv[2], timeout=5):
    print("locked", flush=True)
    if sys.argv[3] == "stopped":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(60)
"""


@pytest.mark.parametrize("holder_state", ["hung", "stopped"])
def test_a_lock_held_by_a_hung_or_stopped_process_gives_way_to_an_in_memory_compile(private_cache, holder_state,
                                                                                      monkeypatch):
    import boo_core.kernels.locks as locks

    monkeypatch.setattr(locks, "STOPPED_GRACE", 0.5)
    with isolated_registry({"scale": scale_op}):
        from boo_core.kernels.request import KernelRequest
        from boo_core.kernels.target import Target

        request = KernelRequest.create(ScaleSignature(22), Target.parse("cpu"))
        holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(private_cache), request.key.dirname,
                                   holder_state], stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert holder.stdout.readline().strip() == "locked"
            start = time.monotonic()
            expected = (rf"held by process {holder.pid}, which has been stopped" if holder_state == "stopped" else
                        rf"{request.key.dirname} has been held by another process for 2 s \(BOO_LOCK_TIMEOUT\), "
                        rf"process {holder.pid}")
            with settings_override(lock_timeout=2 if holder_state == "hung" else 60):
                with pytest.warns(cache.BooCacheWarning, match=rf"gave up waiting .*{expected}.*in memory"):
                    kernel = request.fetch()
            assert kernel.directory is None and kernel.vmfb  # compiled, not taken from the holder's entry
            assert time.monotonic() - start < 30
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
              "BOO_CUDA_GRAPH_REPLAY": "0",
              "BOO_USE_BACKWARD_KERNELS": "1", "BOO_GRAPH_REWRITES": "1",
              "BOO_VERIFY": "0", "BOO_USE_TUNED": "0", "BOO_COMPILE_STRICT": "1", "BOO_STRICT_PLUGINS": "1",
              "BOO_DISABLE_PLUGIN_AUTOLOAD": "1", "BOO_DISABLE_PLUGINS": "a,b", "BOO_LOAD_PLUGINS": "c",
              "BOO_TRACE_HOOKS": "1", "BOO_WORKER": "0", "BOO_WORKER_TIMEOUT": "30", "BOO_WORKER_IDLE": "5",
              "BOO_SUBSTITUTIONS": "/tmp/substitutions", "BOO_CACHE_OWNER": "0", "BOO_COMPILE_THREADING": "0"}
    assert set(values) == {s.env for s in SETTINGS}
    from_env = boo_env(**values)
    defaults = Settings()
    for setting in SETTINGS:
        assert getattr(from_env, setting.name) != getattr(defaults, setting.name), setting.env
        # configure() can set every one of them, to the value the environment gave.
        with settings_override(**{setting.name: getattr(defaults, setting.name)}):
            assert getattr(boo_core.get_settings(), setting.name) == getattr(defaults, setting.name)
    assert from_env.extra_compile_flags == ("--a", "--b c") and from_env.disabled_plugins == {"a", "b"}
    assert from_env.loaded_plugins == {"c"} and configure(loaded_plugins="").loaded_plugins is None
    assert configure(verify=True).verify == "all"


@pytest.mark.parametrize("variable, value, message", [
    ("BOO_CACHE_ON", "maybe", r"BOO_CACHE_ON='maybe': expected 0 or 1"),
    ("BOO_CACHE_OWNER", "no-such-user-x", r"BOO_CACHE_OWNER='no-such-user-x': no user 'no-such-user-x'"),
    ("BOO_VERIFY", "sometimes", r"BOO_VERIFY='sometimes': expected auto, 1 or 0"),
    ("BOO_COMPILE_TIMEOUT", "-3", r"BOO_COMPILE_TIMEOUT='-3': expected a positive number of seconds"),
    ("BOO_CPU_DRIVER", "cuda", r"BOO_CPU_DRIVER='cuda': expected one of auto, local-sync, local-task"),
    ("BOO_CUDA_LAUNCH", "async", r"BOO_CUDA_LAUNCH='async': expected one of direct, iree"),
    ("BOO_CACHE_DIR", f"~{NO_SUCH_USER}/x", rf"^BOO_CACHE_DIR='~{NO_SUCH_USER}/x': cannot expand ~{NO_SUCH_USER}: "
                                           r"no such user or home directory$"),
    ("BOO_SUBSTITUTIONS", f"~{NO_SUCH_USER}", rf"^BOO_SUBSTITUTIONS='~{NO_SUCH_USER}': cannot expand"),
    ("BOO_TUNING_SPEC_PATH", f"~{NO_SUCH_USER}/spec.mlir", rf"^BOO_TUNING_SPEC_PATH='~{NO_SUCH_USER}/spec.mlir': "),
    ("BOO_EXTRA_COMPILE_FLAGS", "--iree-opt-level=O3 'unclosed",
     r"""^BOO_EXTRA_COMPILE_FLAGS="--iree-opt-level=O3 'unclosed": cannot split into flags: No closing quotation$"""),
    ("BOO_EXTRA_COMPILE_FLAGS", "--iree-opt-level O3", r"^BOO_EXTRA_COMPILE_FLAGS='--iree-opt-level O3': 'O3' is not "
                                                       r"an option \(each flag starts with -, its value after =: "),
    ("BOO_EXTRA_COMPILE_FLAGS", "''", r"""^BOO_EXTRA_COMPILE_FLAGS="''": '' is not an option"""),
    ("BOO_EXTRA_COMPILE_FLAGS", "-- --x", r"^BOO_EXTRA_COMPILE_FLAGS='-- --x': '--' is not an option"),
    ("BOO_USE_BACKWARD_KERNELS", "bnorm layernorm", r"^BOO_USE_BACKWARD_KERNELS='bnorm layernorm': expected 0, 1, "
                                                    r"auto or op names separated by commas"),
    ("BOO_USE_BACKWARD_KERNELS", ",", r"^BOO_USE_BACKWARD_KERNELS=',': expected 0, 1, auto or op names"),
])
def test_a_bad_setting_is_an_error_naming_the_variable(boo_env, variable, value, message):
    with pytest.raises(SettingError, match=message):
        boo_env(**{variable: value})


def test_backward_kernels_are_chosen_for_every_op_none_or_the_ops_named(boo_env):
    assert boo_env(BOO_USE_BACKWARD_KERNELS="1").backward_kernels_for("conv")
    assert not boo_env(BOO_USE_BACKWARD_KERNELS="0").backward_kernels_for("conv")
    chosen = boo_env(BOO_USE_BACKWARD_KERNELS=" bnorm, layernorm ")
    assert chosen.use_backward_kernels == {"bnorm", "layernorm"}
    assert chosen.backward_kernels_for("bnorm") and not chosen.backward_kernels_for("conv")
    assert configure(use_backward_kernels=["matmul"]).backward_kernels_for("matmul")
    assert configure(use_backward_kernels="conv").use_backward_kernels == {"conv"}
    assert configure(use_backward_kernels=False).use_backward_kernels is False
    # auto, the default: the batch norms' gradients on CUDA devices, none elsewhere or where the device is unknown
    assert Settings().use_backward_kernels == "auto"
    auto = boo_env(BOO_USE_BACKWARD_KERNELS=" Auto")
    assert auto.use_backward_kernels == "auto"
    assert auto.backward_kernels_for("bnorm", "cuda") and not auto.backward_kernels_for("conv", "cuda")
    assert not any(auto.backward_kernels_for("bnorm", device) for device in ("cpu", None))
    assert auto.backward_ops("cpu") is False and auto.backward_ops("cuda") == {"bnorm"}
    assert boo_env(BOO_USE_BACKWARD_KERNELS="1").backward_ops("cpu") is True
    # a name no plugin registers is an error naming the variable when an op asks (its backward)
    configure(use_backward_kernels="bnorm,bnrom")
    with pytest.raises(SettingError, match=r"^BOO_USE_BACKWARD_KERNELS names no op bnrom; the ops are .*bnorm"):
        BooOpRegistry.backward_kernels_for("bnorm")


@pytest.mark.parametrize("changes, message", [
    ({"cache_dir": f"~{NO_SUCH_USER}"}, rf"^configure\(cache_dir='~{NO_SUCH_USER}'\): cannot expand"),
    ({"extra_compile_flags": ["--iree-opt-level", "O3"]}, r"^configure\(extra_compile_flags=\['--iree-opt-level', "
                                                           r"'O3'\]\): 'O3' is not an option"),
])
def test_configure_names_the_setting_and_value_it_refuses(changes, message):
    with pytest.raises(SettingError, match=message):
        configure(**changes)


def test_a_substitution_root_that_is_a_file_or_missing_is_named_by_its_variable(boo_env, tmp_path):
    from boo_core.errors import SubstitutionError
    from boo_core.runtime.devices import Target
    from boo_core.substitute.candidates import user_substitution

    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for root in (afile, tmp_path / "missing"):
        boo_env(BOO_SUBSTITUTIONS=str(root))
        with pytest.raises(SubstitutionError, match=rf"^BOO_SUBSTITUTIONS={root}: not a directory$"):
            user_substitution(ScaleSignature(8), Target.parse("cpu"))
    assert boo_env(BOO_SUBSTITUTIONS="").substitutions is None


def test_relative_paths_become_absolute_so_none_reads_as_an_option(boo_env, tmp_path, monkeypatch):
    """A cache directory named ``-cache`` (relative) would reach iree-compile as an option."""
    monkeypatch.chdir(tmp_path)
    settings = boo_env(BOO_CACHE_DIR="-cache", BOO_SUBSTITUTIONS="-subs", BOO_TUNING_SPEC_PATH="-spec.mlir")
    assert settings.cache_dir == tmp_path / "-cache" and settings.cache_dir.is_absolute()
    assert settings.substitutions == tmp_path / "-subs" and settings.tuning_spec == tmp_path / "-spec.mlir"
    with settings_override(cache_dir="-other"):
        assert boo_core.get_settings().cache_dir == tmp_path / "-other"
    boo_env(BOO_TUNING_SPEC_PATH="", BOO_SUBSTITUTIONS="")
    with isolated_registry({"scale": scale_op}):
        launchable = get_launchable(ScaleSignature(8, 3.0))
    [entry] = [p for p in (tmp_path / "-cache").iterdir() if p.name.startswith("scale_")]
    command = (entry / cache.COMMAND_FILE).read_text()
    assert f" {tmp_path}/-cache/" in command and " -cache/" not in command
    x = torch.ones(8)
    assert torch.equal(launchable(x), x * 3.0)


def test_configure_refuses_unknown_names():
    with pytest.raises(TypeError, match=r"configure\(\) got unknown settings \['cache'\]"):
        configure(cache=True)


def test_the_readme_settings_table_is_the_registry_s():
    readme = (REPO / "README.md").read_text()
    assert markdown_table() in readme


@pytest.mark.parametrize("package", ["boo_ops_batchnorm", "boo_ops_conv", "boo_ops_matmul", "boo_ops_layernorm",
                                     "boo_ops_softmax", "boo_ops_rmsnorm"])
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
