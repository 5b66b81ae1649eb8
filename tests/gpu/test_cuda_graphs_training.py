"""Training under ``backend="iree_boo", mode="reduce-overhead"``: the forward graph lends its
saved activations to the backward graph instead of cloning them out and copying them in
(boo_core.dynamo.cuda_graphs), and never overwrites what a step still holds."""

from __future__ import annotations

import pytest
import torch

from boo_core import BooError
from boo_core.dynamo import backends
from boo_core.dynamo.cuda_graphs import GraphedFunction

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"


class Doubled(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(16 * 10 * 10, 10)).to(DEVICE).train()


@pytest.fixture
def graphs(monkeypatch) -> dict[str, GraphedFunction]:
    """The graphed functions the backend makes, by kind."""
    made: dict[str, GraphedFunction] = {}
    original = backends.graphed

    def recording(fn, name, lent=(), borrows=False):
        made[name.split()[1]] = original(fn, name, lent, borrows)
        return made[name.split()[1]]

    monkeypatch.setattr(backends, "graphed", recording)
    return made


def _train(model: torch.nn.Module, batches: list[torch.Tensor], accumulate: int = 1,
           backwards: int = 1) -> list[torch.Tensor]:
    """SGD steps over ``batches``, ``accumulate`` forwards summed into each backward and the
    gradients of ``backwards`` backwards into each step; the losses."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    per_step = accumulate * backwards
    for start in range(0, len(batches), per_step):
        optimizer.zero_grad()
        for first in range(start, start + per_step, accumulate):
            loss = sum(model(x).square().mean() for x in batches[first:first + accumulate])
            loss.backward()
            losses.append(loss.detach())
        optimizer.step()
    return losses


def _batches(n: int) -> list[torch.Tensor]:
    generator = torch.Generator(device=DEVICE).manual_seed(1)
    return [torch.randn(4, 8, 10, 10, device=DEVICE, generator=generator) for _ in range(n)]


def _trains_like_eager(n: int, **schedule: int) -> torch.nn.Module:
    """``n`` batches of SGD (``schedule``: ``_train``'s) compiled with CUDA graphs and in
    eager: the same losses and parameters. The compiled model."""
    torch._dynamo.reset()
    model, reference = _model(), _model()
    batches = _batches(n)
    got = _train(torch.compile(model, backend="iree_boo", mode="reduce-overhead", dynamic=False), batches,
                 **schedule)
    want = _train(reference, batches, **schedule)
    torch.testing.assert_close(torch.stack(got), torch.stack(want), rtol=1e-3, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=name)
    return model


def test_training_replays_and_the_backward_reads_the_forwards_saved_tensors_in_place(graphs):
    model = _trains_like_eager(8)
    forward, backward = graphs["forward"], graphs["backward"]
    assert forward.replays >= 5 and backward.replays >= 5, (forward.replays, backward.replays)
    assert forward.unlent_runs == 0
    # The activations the backward reads are the forward's memory: none is copied in per step.
    assert len(backward._borrowed) >= 4, backward._borrowed
    assert not set(dict(backward._borrowed)) & set(backward._copied)
    # The gradients are the backward's memory too: lent, not cloned, and let go of in time.
    assert backward.unlent_runs == 0 and backward._lends_outputs
    graph_memory = {o.data_ptr() for o in backward._outputs if isinstance(o, torch.Tensor)}
    assert all(p.grad.data_ptr() in graph_memory for p in model.parameters())
    torch._dynamo.reset()


def test_gradients_accumulated_over_several_backwards_are_never_overwritten(graphs):
    """Three backwards into each step's gradients: a replay must not overwrite the lent
    gradients the caller still accumulates into, so the backward runs without its graph until
    they are let go, then replays cloning its outputs."""
    _trains_like_eager(18, backwards=3)
    backward = graphs["backward"]
    assert backward.unlent_runs >= 1 and not backward._lends_outputs
    assert backward.replays >= 3, backward.replays
    torch._dynamo.reset()


def test_a_forward_whose_lent_memory_is_still_held_runs_without_its_graph(graphs):
    """Two forwards summed into one backward: the second must not overwrite the activations
    the first lent, which the backward has not read yet."""
    _trains_like_eager(12, accumulate=2)
    assert graphs["forward"].unlent_runs >= 1
    torch._dynamo.reset()


def test_a_second_backward_through_an_overwritten_step_raises(graphs):
    """With retain_graph=True a step's activations outlive its backward; once a later replay
    has overwritten them, a second backward through that step must fail loudly. (The model
    doubles its input first, so no saved tensor is the graph's input, whose copy a version
    counter would catch; AOTAutograd refuses retain_graph itself where it donates the backward's
    buffers: not here.)"""
    torch._dynamo.reset()
    with torch._functorch.config.patch(donated_buffer=False):
        model = torch.nn.Sequential(Doubled(), _model())
        compiled = torch.compile(model, backend="iree_boo", mode="reduce-overhead", dynamic=False)
        batches = _batches(5)
        for x in batches[:3]:  # two warm-up steps and the recording
            compiled(x).square().mean().backward()
        loss = compiled(batches[3]).square().mean()
        loss.backward(retain_graph=True)
        compiled(batches[4]).square().mean().backward()  # replays over what the step before lent
        assert graphs["forward"].replays >= 2
        with pytest.raises(BooError, match="overwrote"):
            loss.backward()
    torch._dynamo.reset()
