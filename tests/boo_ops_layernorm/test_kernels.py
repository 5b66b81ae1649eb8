"""How the layernorm kernels are built: compile flags, plugin MLIR, dispatch counts."""

from __future__ import annotations

import subprocess

import pytest
import torch

from boo_core import BooOpRegistry
from boo_core.kernels.compiler import compile_command
from boo_core.kernels.export import export_mlir
from boo_core.kernels.request import KernelRequest
from boo_core.runtime.devices import Target
from boo_ops_layernorm import LayerNormSignature as S
from boo_ops_layernorm.hooks import CPU_FLAGS, GPU_FORWARD_FLAGS
from boo_ops_layernorm.mlir import block_rows

CPU = Target.parse("cpu")


def dispatch_count(signature: S, directory) -> int:
    """Compile ``signature`` as BOO does and count the executables IREE forms."""
    request = KernelRequest.create(signature, CPU)
    source = directory / "kernel.mlir"
    source.write_text(request.source())
    dump = directory / "executables"
    command = compile_command(source, directory / "kernel.vmfb",
                              [*request.flags, f"--iree-hal-dump-executable-sources-to={dump}"])
    subprocess.run(command, check=True, capture_output=True)
    return len(list(dump.glob("*.mlir")))


@pytest.mark.parametrize("signature, count", [
    (S((4096, 1024), 1, True, True), 1),  # reductions and normalization fused
    (S((4096, 1024), 1, True, True, dtype=torch.bfloat16, mode="bwd"), 3),  # dx; dw/db per block; over blocks
])
def test_transformer_sized_kernels_are_few_dispatches(signature, count, tmp_path):
    assert dispatch_count(signature, tmp_path) == count


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_the_plugin_sets_cpu_flags_and_provides_mlir_on_the_cpu_only(mode):
    signature = S((8, 16), 1, mode=mode)
    request = KernelRequest.create(signature, CPU)
    assert request.flags[-len(CPU_FLAGS):] == CPU_FLAGS
    assert request.formulation.name == "linalg"
    assert request.source().startswith(f"func.func @layernorm_{mode}_f32_8x16_o1_affine_none_eps1em05")
    assert [f.name for f in BooOpRegistry.default().formulations(signature, CPU)] == ["linalg", "default"]
    elsewhere = KernelRequest.create(signature, Target.parse("cuda:sm_80"))  # an export, no CPU flags
    # On GPUs the forward exports its statistics as plain means (the reference's scaled sums
    # do not compile for CUDA) and is fused into one dispatch; the backward exports the
    # reference (8 rows: too few for dw and db in stages).
    assert elsewhere.formulation.name == ("mean_statistics" if mode == "fwd" else "default")
    assert "--iree-llvmcpu-reassociate-fp-reductions=true" not in elsewhere.flags
    assert set(GPU_FORWARD_FLAGS) <= set(elsewhere.flags) if mode == "fwd" else \
        not set(GPU_FORWARD_FLAGS) & set(elsewhere.flags)


@pytest.mark.parametrize("rows, block", [(4096, 16), (48, 16), (1000, 10), (37, 1), (6, 6), (1, 1)])
def test_parameter_gradients_sum_blocks_of_rows_that_divide_the_row_count(rows, block):
    assert block_rows(rows) == block


@pytest.mark.parametrize("signature", [S((3, 4, 5), 1, True, True, dtype=torch.bfloat16),
                                       S((6, 5), 1, True, False, mode="bwd")], ids=lambda s: s.mode)
def test_the_reference_exports_for_targets_without_plugin_mlir(signature):
    assert f"func.func @{signature.func_name}(" in export_mlir(signature)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_gpu_forward_formulation_computes_the_reference(dtype):
    signature = S((6, 40), 1, dtype=dtype, weight=True, bias=True)
    [means] = [f for f in BooOpRegistry.default().formulations(signature, Target.parse("cuda:sm_80"))
               if f.name == "mean_statistics"]
    x = torch.randn(6, 40, dtype=dtype) * 3 + 5
    params = (torch.randn(40, dtype=dtype), torch.randn(40, dtype=dtype))
    for got, want in zip(means.computation(x, *params), signature.reference(x, *params), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=1e-5)
    x[2, 3] = float("inf")  # a variance that is not finite: NaN statistics, as the reference's
    got = means.computation(x, *params)
    assert got[2][2].isnan().all() and got[0][2].isnan().all() and not got[0][0].isnan().any()
