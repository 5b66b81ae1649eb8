"""What BOO's CUDA graphs lend, decided on the CPU: a training forward graph lends exactly the
outputs AOTAutograd saves for the backward, the backward borrows, and a backward handed a lent
view that a later replay overwrote raises (the replays themselves: tests/gpu)."""

from __future__ import annotations

import pytest
import torch

from boo_core import BooError
from boo_core.dynamo import backends, cuda_graphs


def test_a_training_forward_lends_what_its_backward_reads(monkeypatch):
    made = []
    original = backends.graphed

    def recording(fn, name, lent=(), borrows=False):
        made.append((name, list(lent), borrows))
        return original(fn, name, lent, borrows)

    monkeypatch.setattr(backends, "graphed", recording)
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    compiled = torch.compile(model, backend=backends.boo_backend(cuda_graphs=True), dynamic=False)
    x = torch.randn(3, 8)
    compiled(x).sum().backward()  # on the CPU the graphed functions run without graphs
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, expected in zip(want, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, expected)
    (forward, lent, forward_borrows), (backward, nothing, backward_borrows) = made
    assert "forward" in forward and "backward" in backward
    # one output for the caller, the rest (inputs and activations of the two linears) saved
    assert lent[0] == 1 and lent == list(range(1, lent[-1] + 1)) and len(lent) >= 3
    assert nothing == [] and backward_borrows and not forward_borrows
    torch._dynamo.reset()


class _Lender:
    name = "a forward graph"
    replays = 3
    _read_back = False
    _read_on = None


def test_a_backward_reading_a_view_of_an_earlier_replay_raises():
    lender = _Lender()
    current, stale = torch.zeros(2), torch.zeros(2)
    current._boo_lent = (lender, 3)
    cuda_graphs._read_lent([torch.ones(1), current])
    assert lender._read_back  # the lender may replay again
    stale._boo_lent = (lender, 2)  # lent at replay 2, overwritten by replay 3
    with pytest.raises(BooError, match="overwrote"):
        cuda_graphs._read_lent([stale])
