"""torch's own kernel as the alternative: a node whose kernels ``boo tune`` timed slower than
PyTorch's (the tuning record's ``torch_us``) stays with the nested backend in every mode, and
says why; its kernels are not even loaded."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from boo_core import clear_launchables
from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.dynamo.trace import kernel_signatures
from boo_core.kernels import activity
from boo_core.kernels.tuning_records import read_record, write_record
from boo_core.settings import settings_override
from boo_core.tools.cli import main
from boo_core.tune.tuner import TuneOptions, Tuner
from boo_core.verify.verdicts import device_identity

DEVICE = device_identity(torch.device("cpu"))


def _model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval(), torch.randn(4, 16)


@pytest.mark.kernel
def test_a_node_boo_tune_timed_slower_than_torchs_kernel_is_left_to_pytorch(private_cache, capsys):
    model, x = _model()
    first, second = kernel_signatures(model, x)  # the two linear layers (the first with its ReLU)
    [*tunes] = Tuner(TuneOptions(iterations=3, warmup=1)).tune([(s.to_command(), s) for s in (first, second)])
    for tune, signature in zip(tunes, (first, second)):  # the tuner keeps PyTorch's time beside its winner's
        record = read_record(signature, "cpu", DEVICE)
        assert record.torch_us == pytest.approx(tune.torch_us) and record.torch_us > 0
    # The times as if PyTorch's kernel had won the first and lost the second.
    for signature, torch_faster in ((first, True), (second, False)):
        record = read_record(signature, "cpu", DEVICE)
        write_record(dataclasses.replace(record, torch_us=record.time_us * (0.5 if torch_faster else 2.0)), signature)

    clear_launchables()
    reset_offload_summary()
    torch._dynamo.reset()
    before = activity.counts()
    with torch.no_grad():
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    summary = offload_summary()
    assert summary.offloaded["matmul.addmm"] == 1 and summary.fallbacks["aten.addmm"] == 1, summary
    assert summary.reasons["aten.addmm"].startswith("`boo tune` timed torch's kernel faster here"), summary.reasons
    loaded = {event: activity.counts()[event] - before.get(event, 0) for event in activity.KERNEL_EVENTS}
    assert sum(loaded.values()) == 1, loaded  # the second layer's kernel only

    # `boo cache info --list` shows which records leave their nodes to PyTorch.
    assert main(["cache", "info", "--list"]) == 0
    listed = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  tuned: ")}
    assert listed[first.func_name].endswith("torch.compile leaves it to PyTorch"), listed
    assert "PyTorch" in listed[second.func_name] and not listed[second.func_name].endswith("PyTorch"), listed

    # Without the records (BOO_USE_TUNED=0), both layers run on BOO again.
    reset_offload_summary()
    torch._dynamo.reset()
    with settings_override(use_tuned=False), torch.no_grad():
        torch.compile(model, backend="iree_boo", dynamic=False)(x)
    assert offload_summary().offloaded["matmul.addmm"] == 2
    torch._dynamo.reset()
