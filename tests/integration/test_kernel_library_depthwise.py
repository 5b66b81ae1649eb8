"""The example kernel library's depthwise convolutions (examples/boo_kernels_hopper,
``depthwise``) where it cannot build kernels: which signatures it serves, the executables it
finds in the conv op's ``depthwise`` modules (cross-compiled for CUDA here, no GPU needed)
and the modules it refuses. Its kernels run on a Hopper GPU in
tests/gpu/test_kernel_library_depthwise.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from boo_core import Target
from boo_core.substitute import executables_of
from boo_ops_conv import ConvSignature

depthwise = pytest.importorskip("boo_kernels_hopper.depthwise")
hooks = pytest.importorskip("boo_kernels_hopper.hooks")

CUDA = "cuda:sm_80"


def depthwise_conv(c: int, size: int, mode: str, window: int = 7, stride: int = 1, n: int = 2,
                   padding: int | None = None, **options: object) -> ConvSignature:
    return ConvSignature((n, c, size, size), (c, 1, window, window), stride=stride,
                         padding=window // 2 if padding is None else padding, groups=c, dtype=torch.bfloat16,
                         shared_layout="NHWC", mode=mode, **options)


def test_it_knows_which_depthwise_convolutions_it_serves():
    forward = depthwise.problem_of(depthwise_conv(96, 14, "fwd", bias=True))
    assert (forward.mode, forward.h, forward.p, forward.ph, forward.bias) == ("fwd", 14, 14, 3, True)
    strided = depthwise.problem_of(depthwise_conv(64, 15, "fwd", window=3, stride=2))
    assert (strided.sh, strided.p, strided.q) == (2, 8, 8)
    # a data gradient convolves dY (h, w = dY's) into dX (p, q) with the taps reversed: padding window - 1 - p
    backward = depthwise.problem_of(depthwise_conv(96, 14, "bwd", window=5, padding=1))
    assert (backward.h, backward.p, backward.ph, backward.sh) == (12, 14, 3, 1)
    weights = depthwise.problem_of(depthwise_conv(96, 15, "wrw", stride=2))
    assert (weights.h, weights.p) == (15, 8)
    signature = depthwise_conv(96, 14, "fwd")
    for other in ({"dtype": torch.float16}, {"activation": "relu"}, {"dilation": (2, 2)}, {"input_layout": "NCHW"},
                  {"mode": "bwd", "stride": (2, 2)}, {"kernel_shape": (96, 2, 7, 7), "groups": 48},
                  {"kernel_shape": (96, 96, 7, 7), "groups": 1}):
        assert depthwise.problem_of(dataclasses.replace(signature, **other)) is None, other


@pytest.mark.parametrize("signature", [depthwise_conv(96, 14, "fwd", bias=True),
                                       depthwise_conv(64, 15, "fwd", window=3, stride=2),
                                       depthwise_conv(96, 14, "bwd")], ids=lambda s: s.func_name)
def test_it_finds_the_convolution_in_the_depthwise_module(private_cache, signature):
    """Two executables: IREE's rearrangement of the taps (kept), then the convolution
    binding the source, the rearranged taps, [the bias,] the output: replaced."""
    problem = depthwise.problem_of(signature)
    found = executables_of(signature, CUDA, depthwise.FORMULATION)
    assert len(found.executables) == 2
    launch = depthwise.plan(problem, found.executables)
    assert launch.executable is found.executables[1]
    assert len(launch.executable.exports[0].bindings) == 4 if problem.bias else 3
    with pytest.raises(ValueError):  # a problem of another size
        depthwise.plan(dataclasses.replace(problem, c=problem.c * 2), found.executables)
    with pytest.raises(ValueError):  # the module of another formulation
        depthwise.plan(problem, executables_of(signature, CUDA, "default").executables)


@pytest.mark.parametrize(("signature", "x_binding"), [(depthwise_conv(96, 14, "wrw"), None),
                                                      (depthwise_conv(64, 15, "wrw", window=3, stride=2), 0)],
                         ids=["stride1", "stride2"])
def test_it_finds_the_weight_gradients_products_and_which_binding_is_x(private_cache, signature, x_binding):
    """The products' executable (x and dY, then float32 partial sums per part of the batch)
    is replaced and IREE's sum kept. x is told from dY by the contraction's operands, which
    at stride 2 their sizes confirm."""
    problem = depthwise.problem_of(signature)
    found = executables_of(signature, CUDA, depthwise.FORMULATION)
    launch = depthwise.plan_wgrad(problem, found.executables)
    assert launch.executable is found.executables[0] and launch.parts == signature.input_shape[0]
    if x_binding is not None:
        sizes = [b.tensor for b in launch.executable.exports[0].bindings]
        assert sizes[x_binding] == "tensor<2x15x15x64xbf16>" and launch.x_first == (x_binding == 0)
    with pytest.raises(ValueError):
        depthwise.plan_wgrad(dataclasses.replace(problem, r=5), found.executables)


def test_its_candidates_are_the_chosen_tiles_then_the_others_for_the_tuner():
    for mode in ("fwd", "bwd", "wrw"):
        signature = depthwise_conv(96, 56, mode, n=32)
        offered = hooks.candidates(signature, Target.parse("cuda:sm_90"))
        names = [s.name for s in offered]
        assert names[0] == "hopper_depthwise" and len(names) > 2 and len(set(names)) == len(names)
        assert all(s.formulation == depthwise.FORMULATION for s in offered)
        assert len({s.key for s in offered}) == len(offered)
        problem = depthwise.problem_of(signature)
        for config in [depthwise.choose_config(problem), *depthwise.alternatives(problem, depthwise.choose_config(
                problem))]:
            assert config.bq * config.bc >= 32 * config.num_warps  # every thread holds part of a tile
    assert hooks.candidates(depthwise_conv(96, 56, "fwd", activation="relu"), Target.parse("cuda:sm_90")) is None
