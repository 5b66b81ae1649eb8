"""Batch norms on BOO's kernels inside Inductor's CUDA graph trees (the nested backend's
mode="reduce-overhead" and "max-autotune"): training steps replay, and nothing a BOO node
keeps alive stays in the graphs' memory pool."""

from __future__ import annotations

import copy

import pytest
import torch

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.testing.models import with_running_statistics

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"


def _convnet() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(32))
    return model.to(DEVICE, torch.bfloat16, memory_format=torch.channels_last).train()


def test_training_batch_norms_replay_in_inductors_cuda_graph_trees():
    torch._dynamo.reset()
    model = _convnet()
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="iree_boo_inductor", mode="reduce-overhead")
    reset_offload_summary()
    for _ in range(4):  # warm-up, recording, replays
        # The backward replays too: a cudagraph tree overwrites the gradients it handed out
        # last time, so each step starts from none (accumulating into them raises: the trees' own check).
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        x = torch.randn(8, 16, 14, 14, device=DEVICE, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        got = compiled(x)
        want = reference(x)
        torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=5e-2)
        got.float().square().mean().backward()
        want.float().square().mean().backward()
    assert offload_summary().offloaded.get("bnorm.training", 0) == 2, offload_summary()
    for (name, got_buffer), want_buffer in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(got_buffer.float(), want_buffer.float(), rtol=5e-2, atol=5e-2, msg=name)


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_eval_mode_batch_norms_in_a_training_step_run_on_boo_with_gradients_as_eagers(backend):
    """Frozen batch norms (model.eval(), gradients wanted): the forward's batch norms are BOO's
    inference kernels, and the statistics the backward saves are what torch's op gives on
    CUDA (the running mean and 1 / sqrt(running variance + eps))."""
    torch._dynamo.reset()
    model = with_running_statistics(_convnet().eval())
    reference = copy.deepcopy(model)
    reset_offload_summary()
    x = torch.randn(8, 16, 14, 14, device=DEVICE, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    got = torch.compile(model, backend=backend)(x)
    want = reference(x)
    torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=5e-2)
    probe = torch.randn_like(want)
    (got.float() * probe.float()).sum().backward()
    (want.float() * probe.float()).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        scale = q.grad.float().abs().max().item()
        torch.testing.assert_close(p.grad.float(), q.grad.float(), rtol=5e-2, atol=5e-2 * scale, msg=name)
    assert offload_summary().offloaded["bnorm.inference"] == 2, offload_summary().offloaded
