"""The optional compile hooks: boo_compile_flags and boo_signature_mlir."""

from __future__ import annotations

import pytest
import torch

from boo_core import CompileError, PluginError, get_launchable, hookimpl
from boo_core.devices import Target
from boo_core.kernels import KernelRequest
from boo_core.testing import isolated_registry

from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature
from .fake_plugins.wrong_kernel import TRIPLE


class OptLevelFlags:
    @hookimpl
    def boo_compile_flags(self, signature, target):
        if isinstance(signature, ScaleSignature) and target.backend == "llvm-cpu":
            return ["--iree-opt-level=O1"]
        return None


class TripleMlir:
    """Provides hand-written MLIR computing x * 3 for size-8 scale signatures."""

    @hookimpl
    def boo_signature_mlir(self, signature):  # takes fewer parameters than the spec: allowed
        if isinstance(signature, ScaleSignature) and signature.size == 8:
            return TRIPLE.format(name=signature.func_name, n=signature.size)
        return None


class BrokenMlir:
    @hookimpl
    def boo_signature_mlir(self, signature, target):
        return "func.func @nonsense( {"


class BadFlags:
    @hookimpl
    def boo_compile_flags(self, signature, target):
        return "--not-a-list"


class RaisingFlags:
    @hookimpl
    def boo_compile_flags(self, signature, target):
        raise KeyError("oops")


def test_compile_flags_from_plugins_are_appended_and_keyed(private_cache):
    signature = ScaleSignature(16)
    target = Target.parse("cpu")
    with isolated_registry({"scale": scale_op}):
        plain = KernelRequest.create(signature, target)
    with isolated_registry({"scale": scale_op, "flags": OptLevelFlags()}):
        flagged = KernelRequest.create(signature, target)
        launchable = get_launchable(signature)
        x = torch.randn(16)
        torch.testing.assert_close(launchable(x), x * 2)
        recorded = (launchable.cache_directory / "compile_command.txt").read_text()
    assert flagged.flags == (*plain.flags, "--iree-opt-level=O1")
    assert flagged.key.digest != plain.key.digest
    assert "--iree-opt-level=O1" in recorded and "--iree-llvmcpu-target-cpu=host" in recorded


def test_plugin_mlir_replaces_the_export(private_cache):
    signature = ScaleSignature(8)
    with isolated_registry({"scale": scale_op, "triple": TripleMlir()}):
        launchable = get_launchable(signature)
        x = torch.randn(8)
        torch.testing.assert_close(launchable(x), x * 3)  # the reference would give x * 2
        source = (launchable.cache_directory / "source.mlir").read_text()
        assert source == TRIPLE.format(name=signature.func_name, n=8)
        # Signatures the plugin does not answer for still go through torch.export.
        torch.testing.assert_close(get_launchable(ScaleSignature(9))(torch.ones(9)), torch.full((9,), 2.0))


def test_two_plugins_providing_mlir_is_an_error_naming_both(private_cache):
    with isolated_registry({"scale": scale_op, "triple": TripleMlir(), "broken": BrokenMlir()}):
        with pytest.raises(PluginError, match=r'plugins "triple" \(registered explicitly\) and "broken" '
                                              r"\(registered explicitly\) both provide MLIR for scale_fwd_f32_n8_f2"):
            get_launchable(ScaleSignature(8))


def test_compile_failure_names_the_saved_mlir_and_the_exact_command(private_cache):
    signature = ScaleSignature(5)
    with isolated_registry({"scale": scale_op, "broken": BrokenMlir()}):
        with pytest.raises(CompileError, match=r"iree-compile failed \(exit 1\)") as info:
            get_launchable(signature)
    error = info.value
    assert error.mlir_path.endswith("source.mlir")
    assert open(error.mlir_path).read() == "func.func @nonsense( {"
    assert f"MLIR: {error.mlir_path}" in str(error) and f"command: {error.command}" in str(error)
    assert "iree-compile" in error.command and error.mlir_path in error.command
    saved = open(error.mlir_path.replace("source.mlir", "compile_command.txt")).read().strip()
    assert saved == error.command


@pytest.mark.parametrize("plugin, message", [
    (BadFlags(), r'plugin "bad" \(registered explicitly\): boo_compile_flags must return a sequence of str'),
    (RaisingFlags(), r"plugin \"bad\" \(registered explicitly\) failed in boo_compile_flags: KeyError: 'oops'"),
])
def test_misbehaving_compile_flag_plugins_are_blamed(private_cache, plugin, message):
    with isolated_registry({"scale": scale_op, "bad": plugin}):
        with pytest.raises(PluginError, match=message):
            get_launchable(ScaleSignature(4))
