"""Launch plans of CUDA kernels, read from real cross-compiled kernels (no GPU needed): what
the direct launch path (BOO_CUDA_LAUNCH=direct, tests/gpu/test_direct_launch.py) replays."""

from __future__ import annotations

import json
import re

import pytest
import torch

from boo_core import BooOpRegistry
from boo_core.kernels import launch_plan
from boo_core.kernels.launch_plan import PLAN_FILE, Dispatch, Fill, LaunchPlan, PlanUnsupported, plan_from_hal
from boo_core.kernels.request import KernelRequest
from boo_core.kernels.target import Target
from boo_ops_conv import ConvSignature
from boo_ops_matmul import MatmulSignature

CUDA = Target.parse("cuda:sm_80")
KERNELS = {
    "one dispatch": MatmulSignature(m=64, n=32, k=48),
    "fills and a transient": MatmulSignature(m=17, n=33, k=9, batch=3, trans_a=True, dtype=torch.bfloat16),
    "conv, several dispatches": ConvSignature((2, 16, 14, 14), (32, 16, 3, 3), padding=1, dtype=torch.bfloat16,
                                              shared_layout="NHWC"),
    "conv backward-weight": ConvSignature((2, 16, 14, 14), (32, 16, 3, 3), padding=1, dtype=torch.bfloat16,
                                          shared_layout="NHWC", mode="wrw"),
    # On GPUs layer norm's statistics are plain means (mean_statistics): the reference's scaled
    # sums do not compile for CUDA in IREE 3.13 ("failed to distribute").
    "layer norm": BooOpRegistry.parse_signatures("layernormbfp16 --input 64x1024 -o 1 -m 1 -F 1")[0],
}


def compiled(signature):
    """(entry directory, kernel bytes) of the first formulation, compiled for CUDA."""
    request = KernelRequest.create(signature, CUDA)
    kernel = request.fetch()
    return kernel.directory, kernel.vmfb


@pytest.mark.parametrize("name", KERNELS)
def test_a_cuda_compile_leaves_a_plan_that_binds_every_tensor_and_names_real_kernels(name, private_cache):
    signature = KERNELS[name]
    directory, kernel = compiled(signature)
    plan = launch_plan.read_plan(directory, kernel)
    assert isinstance(plan, LaunchPlan), plan
    specs = [*signature.input_specs(), *signature.output_specs()]
    assert plan.arguments == len(specs)
    for index, spec in enumerate(specs):  # every tensor bound, whole, to a slot
        assert [(s.offset, s.length) for s in plan.slots if s.arg == index] == [(0, spec.nbytes)]
    assert all(s.length <= plan.transients[s.transient] for s in plan.slots if s.transient is not None)
    dispatches = [c for c in plan.commands if isinstance(c, Dispatch)]
    assert dispatches and all(min(d.grid) >= 1 for d in dispatches)
    for kernel_info in plan.kernels:
        ptx = plan.modules[kernel_info.module]
        entry = re.search(rf"\.entry {re.escape(kernel_info.name)}\([^)]*\)\s*\.maxntid (\d+), (\d+), (\d+)", ptx)
        assert entry, f"{kernel_info.name} is not an entry of its PTX"
        assert tuple(int(v) for v in entry.groups()) == kernel_info.block  # the block IREE compiled for
        body = ptx[entry.start():].split(".entry", 2)[1]  # this kernel's code
        assert (kernel_info.shared_memory > 0) == ("__dynamic_shared_memory__" in body)  # what the runtime must give
    for command in plan.commands:
        bindings = command.bindings if isinstance(command, Dispatch) else [command] if isinstance(command, Fill) \
            else [command.source, command.target]
        assert all(0 <= b.slot < len(plan.slots) and b.offset + b.length <= plan.slots[b.slot].length
                   for b in bindings)
    assert LaunchPlan.from_json(plan.to_json("x"), "x") == plan


def test_the_padded_batched_matmul_plan_fills_its_transient_before_the_dispatches_read_it(private_cache):
    plan = launch_plan.read_plan(*compiled(KERNELS["fills and a transient"]))
    first_fill = next(i for i, c in enumerate(plan.commands) if isinstance(c, Fill))
    transient_slots = {i for i, s in enumerate(plan.slots) if s.transient is not None}
    assert plan.commands[first_fill].slot in transient_slots and plan.commands[first_fill].pattern == 0
    assert first_fill < next(i for i, c in enumerate(plan.commands) if isinstance(c, Dispatch))


def test_a_plan_is_only_trusted_for_the_kernel_it_was_made_with(private_cache):
    directory, kernel = compiled(KERNELS["one dispatch"])
    assert isinstance(launch_plan.read_plan(directory, kernel), LaunchPlan)
    assert launch_plan.read_plan(directory, kernel + b"\0") is None


@pytest.mark.parametrize("damage", ["truncated", "not json", "removed", "wrong format", "edited", "resealed"])
def test_a_damaged_edited_or_foreign_plan_is_never_launched_nor_remade_from_the_entrys_files(damage, private_cache):
    directory, kernel = compiled(KERNELS["conv, several dispatches"])
    assert isinstance(launch_plan.read_plan(directory, kernel), LaunchPlan)
    path = directory / PLAN_FILE
    sealed = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:100])
    elif damage == "not json":
        path.write_bytes(b"\xff\x00garbage")
    elif damage == "removed":
        path.unlink()
    elif damage == "wrong format":
        path.write_text(json.dumps({**sealed, "format": 99}))
    elif damage == "edited":  # a larger grid, seal kept: the kernel would write past its buffers
        sealed["commands"][0]["grid"] = [4096, 1, 1]
        path.write_text(json.dumps(sealed))
    else:  # sealed, but under another user's key
        from boo_core.kernels.integrity import seal
        sealed["commands"][0]["grid"] = [4096, 1, 1]
        path.write_text(json.dumps(seal(b"k" * 32, f"launch plan {sealed['kernel_sha256']}", sealed)))
    assert launch_plan.read_plan(directory, kernel) is None
    reason = launch_plan.plan_for_entry(directory, kernel, KERNELS["conv, several dispatches"].func_name)
    assert isinstance(reason, str) and "no launch plan sealed by this cache" in reason
    assert launch_plan.read_plan(directory, kernel) is None


def test_host_code_a_plan_cannot_replay_is_named_and_recorded(private_cache, tmp_path):
    directory, kernel = compiled(KERNELS["one dispatch"])
    hal = (tmp_path / "k.hal.mlir")
    name = KERNELS["one dispatch"].func_name
    with pytest.raises(PlanUnsupported, match=r"no nothing\$async function"):
        plan_from_hal("module {}", "nothing")
    text = (f"  util.func public @{name}$async(%arg0: !hal.buffer_view, %arg1: !hal.fence, %arg2: !hal.fence) {{\n"
            "    %0 = hal.device.queue.copy<%d : !hal.device> source(%b)\n  }\n")
    hal.write_text(text)
    with pytest.raises(PlanUnsupported, match="hal.device.queue.copy"):
        plan_from_hal(text, name)
    reason = launch_plan.write_plan(directory, text, name, kernel)
    assert "hal.device.queue.copy" in reason
    assert launch_plan.read_plan(directory, kernel) == reason  # known: not made again on every load
