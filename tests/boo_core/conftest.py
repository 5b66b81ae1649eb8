from __future__ import annotations

from pathlib import Path

import pytest

from boo_core.testing import isolated_registry

from .fake_plugins import scale_op


@pytest.fixture
def scale_registry():
    """The process default registry holds only the scale test op (registered explicitly)."""
    with isolated_registry({"scale": scale_op}) as registry:
        yield registry


@pytest.fixture(scope="module")
def compile_once():
    """iree-compile run once per MLIR text and flags for the module's tests, its output kept.

    For tests of the kernel cache that rebuild one kernel again and again (each damaged,
    killed or full cache must be healed by a rebuild): the rebuild takes BOO's whole path, its
    export, lock, MLIR file, compile call and writes included; only the iree-compile process
    for an input compiled before is replaced by the bytes it gave then (its output depends on
    its input and flags alone). Failures are not kept: a failing compile runs every time.
    """
    from boo_core.kernels import compiler

    real = compiler.compile_to_bytes
    outputs: dict[tuple[bytes, tuple[str, ...]], bytes] = {}

    def compile_to_bytes(mlir, flags, **kwargs):
        text = mlir.read_bytes() if isinstance(mlir, Path) else str(mlir).encode()
        key = (text, tuple(flags))
        if key not in outputs:
            outputs[key] = real(mlir, flags, **kwargs)
        return outputs[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiler, "compile_to_bytes", compile_to_bytes)
        patch.setattr("boo_core.kernels.request.compile_to_bytes", compile_to_bytes)
        yield outputs
