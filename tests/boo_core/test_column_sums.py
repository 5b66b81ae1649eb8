"""16-bit sums over a tensor's leading dims become products with ones (boo_core.dynamo.column_sums).

The rewrite is for CUDA graphs; these tests name the CPU as a device it applies to, so that
its values can be checked here."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core.dynamo.column_sums import column_sums_as_products

aten = torch.ops.aten
BF16 = torch.bfloat16


def _traced(fn, *shapes, dtype=BF16, mode="fake"):
    return make_fx(fn, tracing_mode=mode)(*(torch.empty(s, dtype=dtype) for s in shapes))


def _targets(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _bias_gradients(dy2, dy3):
    """A linear layer's bias gradient over rows, and over batches of tokens (kept dims)."""
    return dy2.sum(0), dy3.sum([0, 1], keepdim=True), dy2.sum([0]) * 2


def test_sums_down_the_columns_become_products_with_one_vector_of_ones_per_row_count():
    gm = _traced(_bias_gradients, [96, 40], [4, 24, 40])
    assert column_sums_as_products(gm.graph, devices=("cpu",)) == 3
    gm.recompile()
    targets = _targets(gm)
    assert aten.sum.dim_IntList not in targets and targets.count(aten.mm.default) == 3
    assert targets.count(aten.full.default) == 1  # 96 rows all three times: one vector of ones
    dy2, dy3 = torch.randn(96, 40, dtype=BF16), torch.randn(4, 24, 40, dtype=BF16)
    got, want = gm(dy2, dy3), _bias_gradients(dy2, dy3)
    for g, w, exact in zip(got, want, (dy2, dy3, dy2), strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        reference = exact.double().sum(list(range(exact.dim() - 1)), keepdim=g.dim() == exact.dim())
        scale = 2 if g is got[2] else 1
        torch.testing.assert_close(g.double(), scale * reference, rtol=8e-3, atol=8e-3 * reference.abs().max().item())


@pytest.mark.parametrize(("fn", "shape", "dtype"), [
    (lambda x: x.sum(0), [96, 40], torch.float32),  # float32: left as it is
    (lambda x: x.sum(1), [96, 40], BF16),  # the last dim: a row sum, torch's fast case
    (lambda x: x.sum([0, 2]), [4, 24, 40], BF16),  # not only leading dims
    (lambda x: x.sum([0, 1]), [96, 40], BF16),  # every dim
    (lambda x: x.t().sum(0), [40, 96], BF16),  # not contiguous
    (lambda x: x.sum(0, dtype=torch.float32), [96, 40], BF16),  # a float32 result
], ids=["f32", "last dim", "not leading", "every dim", "transposed", "f32 result"])
def test_other_sums_are_left_as_they_are(fn, shape, dtype):
    gm = _traced(fn, shape, dtype=dtype)
    assert column_sums_as_products(gm.graph, devices=("cpu",)) == 0
    assert aten.mm.default not in _targets(gm)


def test_only_the_devices_named_and_only_static_shapes():
    gm = _traced(lambda x: x.sum(0), [96, 40])
    assert column_sums_as_products(gm.graph) == 0  # the CUDA default: a CPU graph keeps torch's sum
    gm = _traced(lambda x: x.sum(0), [96, 40], mode="symbolic")
    assert column_sums_as_products(gm.graph, devices=("cpu",)) == 0
