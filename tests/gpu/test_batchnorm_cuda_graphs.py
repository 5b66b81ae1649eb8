"""Batch norms on BOO's kernels inside Inductor's CUDA graph trees (the nested backend's
mode="reduce-overhead" and "max-autotune"): training steps replay, and nothing a BOO node
keeps alive stays in the graphs' memory pool."""

from __future__ import annotations

import copy

import pytest
import torch

from boo_core.dynamo import offload_summary, reset_offload_summary

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
