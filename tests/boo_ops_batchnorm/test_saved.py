"""A training step's forward saves no running statistics for a batch norm's gradient: the
batch-norm plugin's joint GraphRewrite drops the arguments the training gradient ignores
before AOTAutograd partitions the step, and the step computes exactly what it did."""

from __future__ import annotations

import copy

import pytest
import torch

from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.settings import settings_override
from boo_core.testing.models import with_running_statistics
from boo_ops_batchnorm.saved import BackwardReadsNoRunningStatistics

from .test_fusion import convnet

REWRITE = BackwardReadsNoRunningStatistics.name


def saved_per_step() -> int:
    """How many tensors the forward graphs compiled since the last reset save for the backward."""
    return sum(graph.saved_for_backward for graph in offload_summary().graphs)


def train_step(model: torch.nn.Module, x: torch.Tensor, rewrites: bool | None, backward_kernels: bool,
               backend: str = "iree_boo") -> None:
    torch._dynamo.reset()
    reset_offload_summary()
    changes = {"use_backward_kernels": backward_kernels} | ({} if rewrites is None else {"graph_rewrites": rewrites})
    with settings_override(**changes):
        torch.compile(model, backend=backend, dynamic=False)(x).square().sum().backward()


@pytest.mark.parametrize("backend, backward_kernels", [("iree_boo", True), ("iree_boo", False),
                                                       ("iree_boo_inductor", True)],
                         ids=["boo-gradients", "torch-gradients", "inductor"])
def test_a_training_forward_saves_no_running_statistics(backend, backward_kernels):
    """AOTAutograd's partition (``iree_boo``) and Inductor's (``iree_boo_inductor``) alike."""
    model = convnet().train()
    reference, without = copy.deepcopy(model), copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    train_step(without, x, rewrites=False, backward_kernels=backward_kernels, backend=backend)
    assert not offload_summary().rewritten
    saved_without = saved_per_step()
    train_step(model, x, rewrites=None, backward_kernels=backward_kernels, backend=backend)  # default: every device
    assert offload_summary().rewritten == {REWRITE: 2}
    # two batch norms, a running mean and variance each; the forward report counts what is saved
    assert saved_per_step() == saved_without - 4 and saved_without >= 12, (saved_without, saved_per_step())
    assert "tensors saved for the backward" in offload_summary().graphs[0].line()
    reference(x).square().sum().backward()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-3, msg=name)
    for (name, got), want in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)


def test_the_gradient_of_an_inference_batch_norm_keeps_its_running_statistics():
    """In eval mode the gradient normalizes with the running statistics: they stay its arguments."""
    model = with_running_statistics(convnet().eval())
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    train_step(model, x, rewrites=None, backward_kernels=True)
    assert REWRITE not in offload_summary().rewritten
    reference(x).square().sum().backward()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-3, msg=name)


def test_an_opspec_refuses_a_rewrite_of_an_unknown_graph():
    from boo_core import OpSpec
    from boo_ops_batchnorm import BatchNormParser, BatchNormSignature

    class Elsewhere(BackwardReadsNoRunningStatistics):
        graph = "backward"

    with pytest.raises(ValueError, match="graph rewrite bnorm.backward_without_running_statistics has graph "
                                         "'backward'; expected one of 'forward', 'joint'"):
        OpSpec(name="bnorm", keywords=("bnorm",), signature_class=BatchNormSignature, parser=BatchNormParser(),
               graph_rewrites=(Elsewhere(),))
