"""torch.compile with BOO's backends takes a network's batch norms: inference (with the
ReLU that follows fused into the kernel), training (statistics and running statistics),
and with backward kernels on, their gradients."""

from __future__ import annotations

import copy

import pytest
import torch

from boo_core import BooFallbackWarning
from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.settings import settings_override
from boo_core.testing.models import with_running_statistics
from boo_ops_batchnorm.fusion import BatchNormBackward, BatchNormInference, BatchNormTraining

from .recording import record_graphs, record_signatures


def convnet() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8))


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_inference_batch_norms_run_on_boo_with_the_relu_fused(backend, monkeypatch):
    compiled_for = record_signatures(monkeypatch, BatchNormInference)  # what the pattern asks BOO to build
    # after a conv, an inference batch norm is the conv plugin's (one CBAInfer kernel): here none is
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(3), torch.nn.ReLU(), torch.nn.Conv2d(3, 8, 3, padding=1),
                                torch.nn.Hardtanh(), torch.nn.BatchNorm2d(8)).eval()
    with_running_statistics(model)
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    reset_offload_summary()
    with torch.no_grad():
        got = torch.compile(model, backend=backend, dynamic=False)(x)
        expected = model(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    offloaded = offload_summary().offloaded
    assert offloaded["bnorm.inference"] == 2, offloaded
    assert sorted(s.activation or "none" for s in compiled_for) == ["none", "relu"]  # one with its ReLU


@pytest.mark.parametrize("backward_kernels", [True, "bnorm"])
def test_training_batch_norms_and_their_gradients_run_on_boo(caplog, backward_kernels):
    """Every op's gradients on BOO, or (``BOO_USE_BACKWARD_KERNELS=bnorm``) the batch norms' alone."""
    model = convnet().train()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    torch._dynamo.reset()
    reset_offload_summary()
    with settings_override(use_backward_kernels=backward_kernels):
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    offloaded = offload_summary().offloaded
    assert offloaded["bnorm.training"] == 2 and offloaded["bnorm.backward"] == 2, offloaded
    # the convolutions' gradients: BOO's, or left to PyTorch with the batch norms' alone on BOO
    assert (offloaded["conv.backward"] > 0) == (backward_kernels is True), offloaded
    assert ("aten.convolution_backward" in offload_summary().fallbacks) == (backward_kernels is not True), offloaded
    assert "could not bind" not in caplog.text  # on the CPU no direct call is tried, nor warned about
    # the ReLU after the first batch norm: in its forward kernel, its gradient in its backward kernel
    assert {"aten.relu", "aten.threshold_backward"}.isdisjoint(offload_summary().fallbacks), offload_summary()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-3, msg=name)
    for (name, got), want in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)  # running statistics updated


def test_a_training_forward_writes_the_running_statistics_into_the_buffers_itself(monkeypatch):
    """AOTAutograd keeps the writes into the buffers in the graph, as under Inductor: the
    forward returns no new statistics for its wrapper to copy in afterwards (so that a CUDA
    graph's replay writes them where they are)."""
    graphs = record_graphs(monkeypatch)
    model = convnet().train()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    torch._dynamo.reset()
    torch.compile(model, backend="iree_boo", dynamic=False)(x).sum().backward()
    reference(x).sum().backward()
    # running means and variances copied in by one _foreach_copy_, each step counter counted
    # in place (boo_core.dynamo.copies)
    forward = graphs["forward"]
    [copies] = forward.find_nodes(op="call_function", target=torch.ops.aten._foreach_copy_.default)
    counts = forward.find_nodes(op="call_function", target=torch.ops.aten.add_.Tensor)
    assert len(copies.args[0]) == 4 and len(counts) == 2, (copies, counts)  # 2 batch norms
    assert all(t.op == "placeholder" for t in (*copies.args[0], *(c.args[0] for c in counts)))
    assert not forward.find_nodes(op="call_function", target=torch.ops.aten.copy_.default)
    for (name, got), want in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)


class ResidualBlock(torch.nn.Module):
    """A ResNet basic block: two conv + batch norms, the input (or a downsampling conv + batch
    norm of it) added, then a ReLU."""

    def __init__(self, downsample: bool, relu: bool = True) -> None:
        super().__init__()
        self.relu = relu
        torch.manual_seed(0)
        self.conv1, self.bn1 = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.conv2, self.bn2 = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4)) if downsample else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        summed = out + (x if self.down is None else self.down(x))
        return torch.relu(summed) if self.relu else summed  # without: MobileNetV2's inverted residual


@pytest.mark.parametrize("downsample, relu", [(False, True), (True, True), (False, False)],
                         ids=["identity", "downsample", "identity_no_relu"])
def test_a_residual_blocks_sum_and_relu_join_a_training_batch_norms_kernel(downsample, relu, monkeypatch):
    """The block's sum (and the ReLU after it, where there is one) leave the forward graph:
    the batch norm made last of the two summed values (bn2 with the identity; the downsampling
    one, whose input is bn2's y) adds the other in its kernel. Outputs, gradients (BOO's
    backward kernels) and running statistics as eager's."""
    compiled_for = record_signatures(monkeypatch, BatchNormTraining)
    graphs = record_graphs(monkeypatch)
    model = ResidualBlock(downsample, relu).train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    probe = torch.randn(2, 4, 6, 6)
    torch._dynamo.reset()
    with settings_override(use_backward_kernels=True, compile_strict=True):
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
        (got * probe).sum().backward()
    expected = reference(x)
    (expected * probe).sum().backward()
    # (residual, activation) of bn1, bn2 (and the downsampling batch norm), in graph order
    last = (True, "relu" if relu else None)
    expected_kernels = [(False, "relu"), (False, None), last] if downsample else [(False, "relu"), last]
    assert [(s.residual, s.activation) for s in compiled_for] == expected_kernels
    floating = [n for n in graphs["forward"].nodes if n.op == "call_function" and n.target in (
        torch.ops.aten.add.Tensor, torch.ops.aten.relu.default) and n.meta["val"].is_floating_point()]
    assert floating == [], floating
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    for (name, got_param), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got_param.grad, want.grad, rtol=1e-3, atol=1e-3, msg=name)
    for (name, got_buffer), want in zip(model.named_buffers(), reference.buffers()):
        torch.testing.assert_close(got_buffer, want, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("downsample", [False, True], ids=["identity", "downsample"])
def test_a_residual_blocks_output_gradient_sum_and_relu_gradient_join_its_backward_kernel(downsample, monkeypatch):
    """A stem, then two residual blocks: the first block's output feeds the second twice, so
    its gradient is a sum, and the ReLU's gradient after it is read by the block's batch-norm
    backward and by its identity branch. That backward kernel adds, applies the ReLU's
    gradient and returns it for the branch (``FusionMatch.exposed``): the add and the
    threshold_backward leave the backward graph. Gradients as eager's."""
    compiled_for = record_signatures(monkeypatch, BatchNormBackward)
    graphs = record_graphs(monkeypatch)
    torch.manual_seed(0)
    stem = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    model = torch.nn.Sequential(stem, ResidualBlock(False), ResidualBlock(downsample)).train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    probe = torch.randn(2, 4, 6, 6)
    torch._dynamo.reset()
    with settings_override(use_backward_kernels=True, compile_strict=True):
        (torch.compile(model, backend="iree_boo", dynamic=False)(x) * probe).sum().backward()
    (reference(x) * probe).sum().backward()
    summed = [s for s in compiled_for if s.residual]
    assert len(summed) == 1 and summed[0].activation == "relu", compiled_for
    backward = graphs["backward"]
    # the first block's output: its gradient's sum and ReLU gradient are in the kernel; the
    # stem's (read by its batch norm alone) and the last block's (no sum) stay as before
    relu_gradients = backward.find_nodes(op="call_function", target=torch.ops.aten.threshold_backward.default)
    assert len(relu_gradients) == 1, relu_gradients  # the last block's output ReLU (its gradient has no sum)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=1e-3, msg=name)


def test_a_bfloat16_training_step_keeps_the_running_statistics_in_bfloat16(monkeypatch):
    """A model moved to bf16 keeps bf16 running statistics; the traced graph's batch norm
    returns its new ones in float32 and converts them for the buffers. The kernel reads and
    writes the buffers' bf16 itself, and applies the ReLU after the first batch norm: the
    conversions and the ReLU are gone from the graph."""
    compiled_for = record_signatures(monkeypatch, BatchNormTraining)
    model = convnet().to(torch.bfloat16).train()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8, dtype=torch.bfloat16)
    torch._dynamo.reset()
    reset_offload_summary()
    with settings_override(compile_strict=True):  # a pattern's failure raises instead of falling back
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
    expected = reference(x)
    summary = offload_summary()
    assert summary.offloaded["bnorm.training"] == 2
    assert [s.running_dtype for s in compiled_for] == [torch.bfloat16] * 2
    assert [s.activation for s in compiled_for] == ["relu", None]
    assert "aten._to_copy" not in summary.fallbacks and "aten.relu" not in summary.fallbacks, summary.fallbacks
    torch.testing.assert_close(got.float(), expected.float(), rtol=3e-2, atol=3e-2)
    for (name, got_buffer), want in zip(model.named_buffers(), reference.buffers()):
        assert got_buffer.dtype == want.dtype, name
        torch.testing.assert_close(got_buffer.float(), want.float(), rtol=2e-2, atol=2e-2, msg=name)


def test_a_training_node_whose_kernel_fails_computes_what_the_graph_expects_with_pytorch(monkeypatch):
    """The fallback gives what the kernel would have: the ReLU applied, the running
    statistics in the buffers' bf16 (the graph no longer converts them)."""
    def broken(*args):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(BatchNormTraining, "bind", broken)
    monkeypatch.setattr(BatchNormTraining, "launch", broken)
    model = convnet().to(torch.bfloat16).train()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with pytest.warns(BooFallbackWarning, match="bnorm.training failed at run time"):
        got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
    torch.testing.assert_close(got.float(), reference(x).float(), rtol=3e-2, atol=3e-2)
    for (name, got_buffer), want in zip(model.named_buffers(), reference.buffers()):
        assert got_buffer.dtype == want.dtype, name
        torch.testing.assert_close(got_buffer.float(), want.float(), rtol=2e-2, atol=2e-2, msg=name)


def test_an_inference_node_traced_for_cuda_returns_statistics_of_the_length_the_graph_expects():
    """On CUDA the traced inference op returns one (unread) statistic per channel where the
    CPU returns none: the node's call must give what the graph it was traced in expects (it
    once gave none, and every such node fell back to PyTorch on the GPU)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from boo_core.dynamo.kernel_call import KernelCall, TensorMeta

    def norm(x, weight, bias, mean, var):
        return torch.ops.aten._native_batch_norm_legit_no_training(x, weight, bias, mean, var, 0.1, 1e-5)[0]

    with FakeTensorMode():  # a CUDA graph's metadata, traced without a GPU
        graph = make_fx(norm)(torch.empty(2, 4, 3, 3, device="cuda"), *(torch.empty(4, device="cuda")
                                                                         for _ in range(4))).graph
    node = next(n for n in graph.nodes if n.target is torch.ops.aten._native_batch_norm_legit_no_training.default)
    assert node.meta["val"][1].shape == (4,)
    match = BatchNormInference().match(node)
    call = KernelCall(BatchNormInference(), match.spec, [TensorMeta.of(v) for v in node.meta["val"]], single=False)
    x, weight, bias, mean = (torch.randn(shape) for shape in ((2, 4, 3, 3), (4,), (4,), (4,)))
    var = torch.rand(4) + 0.5
    with settings_override(compile_strict=True):  # a mismatch raises instead of falling back
        y, *statistics = call(x, weight, bias, mean, var)
    assert [s.shape for s in statistics] == [(4,), (4,)]
    expected = torch.nn.functional.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-5)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_inference_node_whose_statistics_are_read_gives_them_as_torch_does(device):
    """An eval-mode batch norm in a training graph (frozen statistics) saves the inference
    op's statistics for its backward: none on the CPU, and on CUDA (traced with fake
    tensors: no GPU needed) the running mean and 1 / sqrt(running variance + eps)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from boo_core.dynamo.kernel_call import KernelCall, TensorMeta
    from boo_core.plugins.patterns import FusionMatch

    def norm(x, weight, bias, mean, var):
        out = torch.ops.aten._native_batch_norm_legit_no_training(x, weight, bias, mean, var, 0.1, 1e-3)
        return out[0], out[1] + 1, out[2] * 2

    with FakeTensorMode():
        graph = make_fx(norm)(torch.empty(2, 4, 3, 3, device=device), *(torch.empty(4, device=device)
                                                                         for _ in range(4))).graph
    node = next(n for n in graph.nodes if n.target is torch.ops.aten._native_batch_norm_legit_no_training.default)
    match = BatchNormInference().match(node)
    assert isinstance(match, FusionMatch) and match.spec["statistics_read"]
    call = KernelCall(BatchNormInference(), match.spec, [TensorMeta.of(v) for v in node.meta["val"]], single=False)
    x, weight, bias, mean = (torch.randn(shape) for shape in ((2, 4, 3, 3), (4,), (4,), (4,)))
    var = torch.rand(4) + 0.5
    with settings_override(compile_strict=True):  # a mismatch raises instead of falling back
        y, saved_mean, saved_invstd = call(x, weight, bias, mean, var)
    torch.testing.assert_close(y, torch.nn.functional.batch_norm(x, mean, var, weight, bias, eps=1e-3),
                               rtol=1e-5, atol=1e-5)
    if device == "cpu":
        assert saved_mean.shape == saved_invstd.shape == (0,)
    else:
        torch.testing.assert_close(saved_mean, mean, rtol=0, atol=0)
        torch.testing.assert_close(saved_invstd, (var + 1e-3).rsqrt(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_an_eval_mode_batch_norm_in_a_training_step_runs_on_boo_with_gradients_as_eagers(backend):
    """Frozen batch norms while the rest trains (model.eval(), gradients wanted): the
    forward's batch norms are BOO's inference kernels, the gradients match eager's."""
    model = with_running_statistics(convnet().eval())
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    reset_offload_summary()
    x_got, x_want = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = torch.compile(model, backend=backend, dynamic=False)(x_got)
    want = reference(x_want)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    probe = torch.randn_like(want)
    (got * probe).sum().backward()
    (want * probe).sum().backward()
    torch.testing.assert_close(x_got.grad, x_want.grad, rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    summary = offload_summary()
    assert summary.offloaded["bnorm.inference"] == 2, summary.offloaded
    assert "aten._native_batch_norm_legit_no_training" not in summary.fallbacks


def test_backward_kernels_of_an_op_that_does_not_exist_are_an_error_naming_the_setting():
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    torch._dynamo.reset()
    with settings_override(use_backward_kernels="bnorm,bnrom"), \
            pytest.raises(Exception, match="BOO_USE_BACKWARD_KERNELS names no op bnrom; the ops are .*bnorm"):
        torch.compile(lambda t: (t * 2).relu().sum(), backend="iree_boo")(x).backward()


@pytest.mark.parametrize("setting", ["auto", "bnorm"])
@pytest.mark.parametrize("channels_last", [True, False])
def test_auto_puts_only_channels_last_batch_norms_gradients_on_boo(monkeypatch, setting, channels_last):
    """``BOO_USE_BACKWARD_KERNELS=auto`` takes the gradients of channels-last batch norms alone
    (a channels-first network's were measured slower); naming the op takes them all. The CPU
    stands in for CUDA here, its ``auto`` entry patched to the batch norm's."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from boo_core import settings as settings_module
    from boo_core.plugins.patterns import Decline, FusionMatch
    from boo_ops_batchnorm.eager import AUTO_DECLINES_CHANNELS_FIRST, gradients_on_boo

    monkeypatch.setitem(settings_module.AUTO_BACKWARD_OPS, "cpu", frozenset({"bnorm"}))
    x = torch.randn(2, 4, 3, 3)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def gradient(dy, x, weight, mean, invstd):
        return torch.ops.aten.native_batch_norm_backward(dy, x, weight, None, None, mean, invstd, True, 1e-5,
                                                         [True, True, True])

    graph = make_fx(gradient, tracing_mode="fake")(torch.randn_like(x), x, *(torch.rand(4) for _ in range(3))).graph
    node = next(n for n in graph.nodes if n.target is torch.ops.aten.native_batch_norm_backward.default)
    with settings_override(use_backward_kernels=setting):
        on_boo = gradients_on_boo(x)
        matched = BatchNormBackward().match(node)
    assert on_boo == (channels_last or setting == "bnorm")
    if on_boo:
        assert isinstance(matched, FusionMatch)
    else:
        assert isinstance(matched, Decline) and matched.reason == AUTO_DECLINES_CHANNELS_FIRST
