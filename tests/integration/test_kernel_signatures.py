"""``boo_core.dynamo.kernel_signatures``: the kernels a torch.compile would build for a model,
found without building any, are exactly those the compile then builds."""

from __future__ import annotations

import copy

import pytest
import torch

import boo_core.dynamo.rewrite as rewrite
from boo_core.dynamo import kernel_calls, kernel_signatures
from boo_core.settings import settings_override


def _block() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5))


def _built_by_a_compile(model: torch.nn.Module, x: torch.Tensor, training: bool, monkeypatch) -> list[str]:
    """The func_names of the kernels torch.compile(backend="iree_boo") asks for, one step run."""
    asked: list[str] = []
    real = rewrite.get_launchable
    monkeypatch.setattr(rewrite, "get_launchable", lambda signature, *a, **k: asked.append(signature.func_name)
                        or real(signature, *a, **k))
    torch._dynamo.reset()
    with settings_override(use_backward_kernels=training):
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        if training:
            compiled(x).sum().backward()
        else:
            with torch.no_grad():
                compiled(x)
    torch._dynamo.reset()
    monkeypatch.setattr(rewrite, "get_launchable", real)
    return asked


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_the_kernels_found_without_building_are_those_a_compile_builds(training, monkeypatch):
    model = _block().train(training)
    x = torch.randn(2, 3, 6, 6)

    built: list[str] = []
    with monkeypatch.context() as patched:  # a failing lookup would only send the node to PyTorch: record it
        patched.setattr(rewrite, "get_launchable", lambda signature, *a, **k: built.append(signature.func_name))
        found = kernel_signatures(model, x, backward=training)
    assert built == []
    names = [s.func_name for s in found]
    assert len(set(names)) == len(names)
    kinds = sorted((s.op_name, s.mode) for s in found)
    if training:
        # conv, batch norm + ReLU and the linear layer; their gradients, but no data gradient
        # of the conv (its input needs none)
        assert kinds == [("bnorm", "bwd"), ("bnorm", "train"), ("conv", "fwd"), ("conv", "wrw"),
                         ("matmul", ""), ("matmul", ""), ("matmul", "")], kinds
    else:
        assert kinds == [("cbainfer", ""), ("matmul", "")], kinds  # conv + batch norm + ReLU as one
    assert sorted(_built_by_a_compile(copy.deepcopy(model), x, training, monkeypatch)) == sorted(names)


def test_it_counts_the_calls_a_step_makes_of_each_kernel():
    """Two convolutions of one shape are one kernel called twice; in training, their weight
    gradients too, and one data gradient (the first conv's input asks for none)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1, bias=False),
                                torch.nn.Conv2d(4, 4, 3, padding=1, bias=False))
    x = torch.randn(2, 4, 6, 6)
    [(forward, calls)] = kernel_calls(model.eval(), x)
    assert (forward.op_name, forward.mode, calls) == ("conv", "fwd", 2)
    found = {s.mode: n for s, n in kernel_calls(model.train(), x, backward=True)}
    assert found == {"fwd": 2, "bwd": 1, "wrw": 2}
    assert [s.func_name for s, _ in kernel_calls(model.train(), x, backward=True)] == \
        [s.func_name for s in kernel_signatures(model.train(), x, backward=True)]


def test_the_step_it_runs_is_pytorchs():
    """The traced step runs every op on PyTorch: the gradients it leaves are eager's."""
    model, x = _block().train(), torch.randn(2, 3, 6, 6)
    eager = copy.deepcopy(model)
    eager(x).sum().backward()
    kernel_signatures(model, x, backward=True)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    with pytest.raises(ValueError, match="no output of fn requires a gradient"):
        kernel_signatures(lambda t: model(t).detach(), x, backward=True)


@pytest.mark.parametrize(("name", "training"), [("resnet50", True), ("resnet50", False), ("vit_b_16", True),
                                                ("decoder", True), ("convnext_tiny", False)])
def test_every_kernel_a_network_compiles_to_prints_a_command_that_parses_back_to_it(name, training):
    """``boo tune``, ``boo numerics`` and the offload summary name a compiled node's kernel by
    its command: the backward batch norms starting with the ReLU's gradient (and a residual
    block's sum) printed ``--activation``/``--residual`` commands their parser refused."""
    from boo_core.testing import assert_round_trip
    from boo_core.testing.models import workload_on

    model, x = workload_on(name, 2, "cpu", torch.float32, small=True)
    signatures = kernel_signatures(model.train(training), x, backward=training)
    assert signatures
    for signature in signatures:
        assert_round_trip(signature)
