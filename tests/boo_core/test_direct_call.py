"""Direct calls (``Launchable.bind``): which views binding accepts as the kernel's own memory,
the strides it gives outputs, and tensors a call declines. Launching needs a GPU
(tests/gpu/test_direct_launch.py); here the launcher only records what it was given."""

from __future__ import annotations

import pytest
import torch

from boo_core.runtime import hal
from boo_core.runtime.direct_call import DirectCall, settle
from boo_core.signatures.signature import TensorSpec

META = torch.device("meta")
bf16 = torch.bfloat16


def spec(*shape: int, dtype: torch.dtype = bf16) -> TensorSpec:
    return TensorSpec("t", tuple(shape), dtype)


def nchw_to_nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1)


def nhwc_to_nchw(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def channels_last(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, dtype=bf16, device=META).contiguous(memory_format=torch.channels_last)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, pointers, stream):
        self.calls.append((pointers, stream))


def bind(inputs, outputs, examples, views=(), output_views=()):
    return settle(Recorder(), inputs, outputs, examples, views, output_views, META, hal.generation)


def test_a_channels_last_tensor_is_an_nhwc_kernels_argument_and_its_output_comes_back_channels_last():
    x = channels_last(2, 8, 5, 7)
    call = bind([spec(2, 5, 7, 8)], [spec(2, 5, 7, 16)], [x], [nchw_to_nhwc], [nhwc_to_nchw])
    assert isinstance(call, DirectCall)
    assert call.outputs == (((2, 16, 5, 7), (16 * 5 * 7, 1, 7 * 16, 16), bf16),)
    want = torch.empty(2, 16, 5, 7).contiguous(memory_format=torch.channels_last)
    assert call.outputs[0][1] == want.stride()


@pytest.mark.parametrize("case", ["contiguous NCHW", "wrong shape", "wrong dtype", "a copy", "other device",
                                  "too few tensors"])
def test_binding_refuses_a_tensor_that_is_not_the_kernels_memory(case):
    x = channels_last(2, 8, 5, 7)
    examples, views, inputs = [x], [nchw_to_nhwc], [spec(2, 5, 7, 8)]
    if case == "contiguous NCHW":
        examples = [torch.empty(2, 8, 5, 7, dtype=bf16, device=META)]  # its NHWC view is not dense in order
    elif case == "wrong shape":
        inputs = [spec(2, 5, 7, 9)]
    elif case == "wrong dtype":
        inputs = [spec(2, 5, 7, 8, dtype=torch.float16)]
    elif case == "a copy":
        views = [lambda t: nchw_to_nhwc(t).contiguous().clone()]  # right shape and order, other memory
    elif case == "other device":
        examples = [torch.empty(2, 8, 5, 7, dtype=bf16).contiguous(memory_format=torch.channels_last)]
    elif case == "too few tensors":
        inputs = [spec(2, 5, 7, 8), spec(8)]
    assert bind(inputs, [spec(2, 5, 7, 16)], examples, views) is None


def test_binding_refuses_an_output_view_with_gaps():
    x = torch.empty(4, 6, dtype=bf16, device=META)
    assert bind([spec(4, 6)], [spec(4, 6)], [x], (), [lambda y: y[:, :3]]) is None
    assert bind([spec(4, 6)], [spec(4, 6)], [x], (), [lambda y: y.t()]) is not None


def test_a_transposed_operand_and_a_bias_row_are_views_of_the_kernels_arguments():
    a = torch.empty(8, 4, dtype=bf16, device=META).t()  # (4, 8) stored transposed
    bias = torch.empty(1, 6, dtype=bf16, device=META)
    call = bind([spec(8, 4), spec(6)], [spec(4, 6)], [a, bias], [lambda t: t.mT, lambda t: t.reshape(-1)])
    assert call is not None
    assert call._expected == (((4, 8), (1, 4), bf16), ((1, 6), (6, 1), bf16))


def test_a_call_declines_other_tensors_and_runs_its_fallback():
    x = channels_last(2, 8, 5, 7)
    call = bind([spec(2, 5, 7, 8)], [spec(2, 5, 7, 16)], [x], [nchw_to_nhwc], [nhwc_to_nchw])
    launcher = call._launcher
    contiguous = torch.empty(2, 8, 5, 7, dtype=bf16, device=META)
    assert call.try_launch(contiguous) is None  # other strides
    assert call.try_launch(x, x) is None  # one tensor too many
    assert call.try_launch(channels_last(2, 8, 5, 7).float()) is None  # other dtype
    assert call.try_launch(x) is None  # not on a GPU
    fallback_calls = []
    assert call.or_else(lambda *t: fallback_calls.append(t) or "fallback")(contiguous) == "fallback"
    assert fallback_calls == [(contiguous,)] and launcher.calls == []


def test_a_call_bound_before_a_fork_declines(monkeypatch):
    x = channels_last(2, 8, 5, 7)
    call = bind([spec(2, 5, 7, 8)], [spec(2, 5, 7, 16)], [x], [nchw_to_nhwc])
    monkeypatch.setattr(hal, "generation", hal.generation + 1)
    assert call.try_launch(x) is None


def test_discarded_outputs_keep_their_metadata_and_survive_or_else():
    """A call that discards outputs still describes every output (the graph's check of what
    it returns compares them all), and its fallback-taking copy discards the same ones."""
    x = torch.empty(4, 6, dtype=bf16, device=META)
    outputs = [spec(4, 6), spec(4, dtype=torch.float32), spec(4, dtype=torch.float32)]
    call = settle(Recorder(), [spec(4, 6)], outputs, [x], (), (), META, hal.generation, discarded=(2, 1))
    assert call.discarded == (1, 2)
    assert [m[0] for m in call.outputs] == [(4, 6), (4,), (4,)]
    assert call.or_else(lambda *t: None).discarded == (1, 2)
    # Their memory is made with the call (when the graph compiles), not by a first launch,
    # which may run inside a CUDA graph pool (tests/gpu/test_direct_launch.py); shared by the copy.
    assert [tuple(t.shape) for t in call._sinks] == [(4,), (4,)]
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    cpu = torch.empty(4, 6, dtype=bf16)
    with FakeTensorMode():  # as when a backend binds while the compiler traces: the memory is still real
        faked = settle(Recorder(), [spec(4, 6)], outputs, [cpu], (), (), cpu.device, hal.generation, discarded=(1,))
    assert not any(isinstance(t, FakeTensor) for t in faked._sinks) and faked._sinks[0].data_ptr()
    assert all(a is b for a, b in zip(call.or_else(lambda *t: None)._sinks, call._sinks))
    with pytest.raises(ValueError, match="out of range"):
        settle(Recorder(), [spec(4, 6)], outputs, [x], (), (), META, hal.generation, discarded=(3,))
