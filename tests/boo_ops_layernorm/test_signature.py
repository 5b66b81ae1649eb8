"""LayerNormSignature: tensors, costs and validation (no kernels compiled)."""

from __future__ import annotations

import pytest
import torch

from boo_core import UnsupportedError
from boo_core.runtime.devices import INLINE_FLOPS_LIMIT
from boo_ops_layernorm import LayerNormSignature as S

f32, bf16 = torch.float32, torch.bfloat16


def specs(tensor_specs):
    return [(s.name, s.shape, s.dtype) for s in tensor_specs]


def test_forward_tensors():
    signature = S((2, 3, 4, 5), 2, weight=True, bias=True, dtype=bf16)
    assert signature.normalized_shape == (4, 5) and signature.stats_shape == (2, 3)
    assert specs(signature.input_specs()) == [("x", (2, 3, 4, 5), bf16), ("weight", (4, 5), bf16),
                                              ("bias", (4, 5), bf16)]
    assert specs(signature.output_specs()) == [("y", (2, 3, 4, 5), bf16), ("mean", (2, 3), f32), ("rstd", (2, 3), f32)]


def test_backward_tensors():
    signature = S((6, 4), 1, weight=True, bias=True, mode="bwd")
    assert signature.gradients == ("dx", "dw", "db")
    assert specs(signature.input_specs()) == [("dy", (6, 4), f32), ("x", (6, 4), f32), ("mean", (6,), f32),
                                              ("rstd", (6,), f32), ("weight", (4,), f32)]
    assert specs(signature.output_specs()) == [("dx", (6, 4), f32), ("dw", (4,), f32), ("db", (4,), f32)]
    only_db = S((6, 4), 1, bias=True, mode="bwd", gradients=("db",))
    assert specs(only_db.input_specs())[-1] == ("rstd", (6,), f32)  # no weight to pass
    assert specs(only_db.output_specs()) == [("db", (4,), f32)]
    assert S((7,), 0, mode="bwd").input_specs()[2].shape == ()


def test_gradients_are_normalized_to_output_order():
    assert S((2, 3), 1, True, True, mode="bwd", gradients=("db", "dx")) == \
        S((2, 3), 1, True, True, mode="bwd", gradients=("dx", "db"))
    assert S((2, 3), 1, mode="bwd").gradients == ("dx",)
    assert S((2, 3), 1).gradients == ()


def test_costs():
    forward = S((4096, 1024), 1, True, True)
    assert forward.flops == 7 * 4096 * 1024 and forward.accumulation_length == 1024
    assert forward.bytes_moved == 4 * (2 * 4096 * 1024 + 2 * 1024 + 2 * 4096)
    backward = S((4096, 1024), 1, True, True, mode="bwd")
    assert backward.flops == (10 + 2 + 1) * 4096 * 1024 and backward.accumulation_length == 4096
    assert S((4096, 1024), 1, True, mode="bwd", gradients=("dx",)).accumulation_length == 1024
    # The driver follows FLOPs: a transformer-sized forward runs on worker threads.
    assert forward.flops >= INLINE_FLOPS_LIMIT > S((2048, 768), 1, True, True).flops


def test_names_encode_every_field():
    names = {s.func_name for s in (S((4, 8), 1), S((4, 8), 1, eps=1e-6), S((4, 8), 1, True), S((4, 8), 1, bias=True),
                                   S((4, 8), 0), S((4, 8), 1, dtype=bf16), S((4, 8), 1, mode="bwd"),
                                   S((4, 8), 1, True, mode="bwd", gradients=("dw",)))}
    assert len(names) == 8
    assert S((4, 8), 1, True, True).func_name == "layernorm_fwd_f32_4x8_o1_affine_wb_eps1em05"


@pytest.mark.parametrize("kwargs, error, pattern", [
    ({"input_shape": (4, 8), "normalized_dim": 2}, ValueError, r"normalized_dim 2 is out of range for a 2-D input"),
    ({"input_shape": (4, 0), "normalized_dim": 1}, ValueError, r"all sizes positive"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "eps": -1.0}, ValueError, r"eps -1.0 must be finite"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "eps": 1e39, "dtype": torch.bfloat16}, ValueError,
     r"eps 1e\+39 is out of f32's range \(magnitude at most 3\.40282e\+38\)"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "dtype": torch.float64}, UnsupportedError,
     r"layernorm dtype torch.float64 is not supported"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "mode": "fwd2"}, ValueError, r"mode 'fwd2' must be 'fwd' or 'bwd'"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "gradients": ("dx",)}, ValueError,
     r"a forward signature returns no gradients"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "mode": "bwd", "gradients": ("dw",)}, ValueError,
     r"gradient\(s\) dw need a weight"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "mode": "bwd", "gradients": ("dz",)}, ValueError,
     r"must be a non-empty subset of \('dx', 'dw', 'db'\)"),
    ({"input_shape": (4, 8), "normalized_dim": 1, "mode": "bwd", "gradients": ()}, ValueError,
     r"must be a non-empty subset"),
])
def test_invalid_signatures_are_refused(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        S(**kwargs)


def test_backward_sample_args_carry_the_true_statistics():
    signature = S((3, 10), 1, weight=True, mode="bwd", dtype=bf16)
    dy, x, mean, rstd, weight = signature.get_sample_args(seed=0)
    assert mean.dtype == rstd.dtype == f32 and weight.dtype == bf16
    xd = x.double()
    torch.testing.assert_close(mean.double(), xd.mean(1))
    torch.testing.assert_close(rstd.double(), 1 / torch.sqrt(xd.var(1, unbiased=False) + 1e-5))


# rows that divide into the first stage's groups and rows that do not (smaller first groups),
# zero rows filling the last group of a later stage
@pytest.mark.parametrize("rows", [20, 64, 131, 6304])
def test_gpu_backward_sums_dw_and_db_in_stages_to_the_same_values(rows):
    from boo_core import Target
    from boo_ops_layernorm.hooks import formulations

    signature = S((rows, 24), 1, weight=True, bias=True, mode="bwd")
    chunked, default = formulations(signature, Target.parse("cuda:sm_80"))
    assert (chunked.name, default.name) == ("chunked_column_sums", "default")
    args = [t.double() for t in signature.get_sample_args()]
    args[3] = args[3].abs() + 0.5  # rstd is positive
    expected = signature.reference(*args)
    got = chunked.computation(*args)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
    dx_only = S((rows, 24), 1, weight=True, mode="bwd", gradients=("dx",))
    assert [f.name for f in formulations(dx_only, Target.parse("cuda:sm_80"))] == ["default"]
    few_rows = S((9, 24), 1, weight=True, bias=True, mode="bwd")  # within one group: nothing to stage
    assert [f.name for f in formulations(few_rows, Target.parse("cuda:sm_80"))] == ["default"]
