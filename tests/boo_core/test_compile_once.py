"""boo_core.testing.compiles: within compiling_once, iree-compile runs once per input and a
formulation is exported once per (signature, computation); each build still takes BOO's path."""

from __future__ import annotations

import pytest
import torch

from boo_core import clear_launchables, get_launchable
from boo_core.kernels import compiler, export
from boo_core.kernels.formulation import Formulation
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry
from boo_core.testing.compiles import compiling_once

from .fake_plugins import scale_op
from .fake_plugins.scale_op import ScaleSignature


@pytest.fixture
def counted(monkeypatch):
    """How many times torch.export and iree-compile really ran."""
    runs = {"export": 0, "compile": 0}
    real_export, real_compile = export._export, compiler.compile_to_bytes

    def exporting(*args, **kwargs):
        runs["export"] += 1
        return real_export(*args, **kwargs)

    def compiling(*args, **kwargs):
        runs["compile"] += 1
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(export, "_export", exporting)
    monkeypatch.setattr(compiler, "compile_to_bytes", compiling)
    return runs


# Signatures no other test uses: the session's own memo (BOO's pytest plugin) must not have them.
SEVEN, FIVE = ScaleSignature(7, factor=1.75), ScaleSignature(5, factor=-0.625)


def test_a_kernel_rebuilt_in_fresh_caches_is_exported_and_compiled_once(counted, tmp_path):
    signature = SEVEN
    with isolated_registry({"scale": scale_op}), compiling_once():
        for attempt in range(3):
            clear_launchables()
            exports_before = export.export_count
            with settings_override(cache_dir=tmp_path / f"cache{attempt}"):
                launchable = get_launchable(signature)
            assert not launchable.cache_hit  # every build takes the whole path into its new cache
            assert export.export_count == exports_before + 1  # and counts as an export
            x = torch.randn(7)
            torch.testing.assert_close(launchable(x), x * 1.75)
    assert counted == {"export": 1, "compile": 1}


def test_another_signature_or_computation_is_exported_again(counted):
    doubled = Formulation("doubled", computation=lambda x: x + x)
    with compiling_once():
        sources = [doubled.source(FIVE), doubled.source(FIVE), doubled.source(SEVEN),
                   Formulation("default").source(FIVE)]
    assert counted["export"] == 3
    assert sources[0] == sources[1] and "tensor<[7]" in sources[2] and sources[3] != sources[0]


def test_a_failed_export_is_not_kept(counted):
    calls = []

    def fails_once(x):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("not exportable this time")
        return x * 2

    formulation = Formulation("flaky", computation=fails_once)
    with compiling_once():
        with pytest.raises(RuntimeError, match="not exportable this time"):
            formulation.source(ScaleSignature(4))
        assert "torch.overwrite.tensor.contents" in formulation.source(ScaleSignature(4))
    assert counted["export"] == 2
