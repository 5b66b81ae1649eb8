"""On the GPU, a batch-first attention block under iree_boo makes none of its reordering
copies: the attention torch picks (cuDNN's on an H100) reads q, k and v as strided views of
the projection, its output's layout is the one the graph was traced with (no view falls back
to a copy), and the result is eager's within bf16's rounding."""

from __future__ import annotations

import copy

import pytest
import torch

from boo_core.dynamo import offload_summary, reorders, reset_offload_summary
from boo_core.testing.models import AttentionBlock

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("batch, tokens, width, heads", [(4, 197, 768, 12), (3, 50, 256, 4)])
def test_a_batch_first_attention_block_copies_nothing_and_is_right(batch, tokens, width, heads):
    torch.manual_seed(0)
    block = AttentionBlock(width, heads).eval().cuda().to(torch.bfloat16)
    x = torch.randn(batch, tokens, width, device="cuda", dtype=torch.bfloat16)
    fallbacks = reorders.fallbacks
    torch._dynamo.reset()
    reset_offload_summary()
    with torch.no_grad():
        compiled = torch.compile(block, backend="iree_boo", dynamic=False)
        for _ in range(3):  # each call must meet the traced layouts, not only the first
            got = compiled(x)
        want = copy.deepcopy(block).float()(x.float())
    error = float((got.float() - want).norm() / want.norm())
    assert error < 1e-2, error
    summary = offload_summary()
    assert sum(g.skipped_reorders for g in summary.graphs) >= 2, summary
    assert summary.fallbacks["aten.clone"] == 0, summary
    assert reorders.fallbacks == fallbacks
    torch._dynamo.reset()
