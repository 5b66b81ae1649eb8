"""The torch.compile backends iree_boo and iree_boo_inductor."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from boo_core import BooFallbackWarning
from boo_core.dynamo import boo_backend, offload_summary, reset_offload_summary
from boo_core.plugins.patterns import FusionMatch, FusionPattern
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry

from ..conftest import REPO

BACKENDS = ["iree_boo", "iree_boo_inductor"]

# The script imports torch and defines the models: nothing of BOO (until its last variants ask
# for BOO's backward kernels). torch.compile finds the backends through their entry points;
# the offload summary is read from BOO's INFO log.
MODELS_SCRIPT = r'''
import logging, sys, traceback, torch
from torch import nn
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
logging.getLogger("boo_core.dynamo").setLevel(logging.INFO)
torch.manual_seed(0)

class ResidualBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        return self.head(y.mean((2, 3)))

class TransformerMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

def run(backend, name, train):
    torch.manual_seed(0)
    model = {"resnet": ResidualBlock, "mlp": TransformerMLP}[name]()
    x = torch.randn(2, 8, 6, 6) if name == "resnet" else torch.randn(4, 7, 16)
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    compiled = torch.compile(model, backend=backend, dynamic=False)
    if not train:
        model.eval()
        with torch.no_grad():
            expected, got = model(x), compiled(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        return
    eager = {"resnet": ResidualBlock, "mlp": TransformerMLP}[name]()
    eager.load_state_dict(reference)
    for m in (model, eager):
        m.train()
    opt_compiled = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1)
    for step in range(2):
        for m, opt in ((compiled, opt_compiled), (eager, opt_eager)):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
    for (k, a), b in zip(model.state_dict().items(), eager.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=lambda m: f"{k}: {m}")

# Each variant (model:mode:backward kernels) in turn, its log after a marker line. Those with
# BOO's backward kernels come last: asking for them imports BOO's settings.
backend, found = sys.argv[1], []
for variant in sys.argv[2:]:
    name, mode, backward = variant.split(":")
    print(f"=== {variant}", file=sys.stderr, flush=True)
    torch._dynamo.reset()
    try:
        if backward == "1":
            from boo_core.settings import settings_override
            with settings_override(use_backward_kernels=True):
                run(backend, name, mode == "train")
        else:
            run(backend, name, mode == "train")
        print(f"=== {variant} ok", file=sys.stderr, flush=True)
    except Exception:
        traceback.print_exc()
    found = found or ["boo_core" in " ".join(sys.modules)]
print("ok", *found)
'''


#: What one process per backend runs, in this order (model:mode:BOO's backward kernels).
VARIANTS = ("resnet:infer:0", "resnet:train:0", "mlp:infer:0", "mlp:train:0", "mlp:train:1", "resnet:train:1")


@functools.cache
def run_models(backend: str) -> dict[str, str]:
    """Every variant through ``backend`` in one fresh process (torch and the backend's cold
    start paid once); each variant's BOO log, by variant. A variant that failed fails its
    own test with its traceback."""
    # CI=1 turns on Inductor's own check that no op with a decomposition reaches it undecomposed.
    result = subprocess.run([sys.executable, "-c", MODELS_SCRIPT, backend, *VARIANTS], capture_output=True,
                            text=True, env={**os.environ, "CI": "1"}, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split()[0] == "ok"
    sections: dict[str, list[str]] = {}
    for line in result.stderr.splitlines():
        if line.startswith("=== "):
            sections.setdefault(line.split()[1], []).append(line)
        elif sections:
            next(reversed(sections.values())).append(line)
    return {variant: "\n".join(lines) for variant, lines in sections.items()}


def offloaded_by_log(backend: str, variant: str) -> str:
    """The BOO log lines of ``variant`` run through ``backend`` (which must have passed)."""
    section = run_models(backend).get(variant, "")
    assert f"=== {variant} ok" in section, section[-4000:] or f"{variant} did not run"
    return "\n".join(line for line in section.splitlines() if line.startswith("boo_core.dynamo:"))


@pytest.mark.kernel  # the process it reads, shared by the tests of a backend, builds them
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["infer", "train"])
def test_resnet_block_in_a_fresh_process(backend, mode):
    log = offloaded_by_log(backend, f"resnet:{mode}:0")
    forward = next(line for line in log.splitlines() if "(forward)" in line or "(inference)" in line)
    # inference: each conv with its batch norm (and ReLU) is one CBAInfer kernel
    convs = "cbainfer.conv_batch_norm x2" if mode == "infer" else "conv.forward x2"
    assert convs in forward and "matmul.addmm x1" in forward
    if mode == "train":
        # the default, auto, leaves the gradients to the nested backend on the CPU
        assert "left to the nested backend (BOO_USE_BACKWARD_KERNELS=auto on cpu)" in next(
            line for line in log.splitlines() if "(backward)" in line)


@pytest.mark.kernel  # the process it reads, shared by the tests of a backend, builds them
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["infer", "train"])
def test_transformer_mlp_block_in_a_fresh_process(backend, mode):
    log = offloaded_by_log(backend, f"mlp:{mode}:0")
    forward = next(line for line in log.splitlines() if "(forward)" in line or "(inference)" in line)
    assert "layernorm.forward x1" in forward and "matmul.addmm x2" in forward


@pytest.mark.kernel  # the process it reads, shared by the tests of a backend, builds them
@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_mlp_backward_kernels(backend):
    log = offloaded_by_log(backend, "mlp:train:1")
    backward = next(line for line in log.splitlines() if "(backward)" in line)
    assert "layernorm.backward x1" in backward and "matmul.mm x4" in backward


@pytest.mark.kernel  # the process it reads, shared by the tests of a backend, builds them
@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_kernels_in_training(backend):
    log = offloaded_by_log(backend, "resnet:train:1")
    backward = next(line for line in log.splitlines() if "(backward)" in line)
    assert "conv.backward x2" in backward and "matmul.mm x2" in backward


class Unclaimed(nn.Module):
    def forward(self, x):
        return torch.cumsum(F.conv2d(x, torch.ones(2, 3, 1, 1)), dim=-1).sort(dim=-1).values


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_no_plugin_claims_still_run_correctly(backend):
    reset_offload_summary()
    x = torch.randn(1, 3, 5, 5)
    torch._dynamo.reset()
    got = torch.compile(Unclaimed(), backend=backend)(x)
    torch.testing.assert_close(got, Unclaimed()(x), rtol=1e-5, atol=1e-5)
    summary = offload_summary()
    assert summary.offloaded["conv.forward"] == 1
    assert summary.fallbacks["aten.cumsum"] == 1 and summary.fallbacks["aten.sort"] == 1


def test_anchors_boo_declines_reach_inductor_decomposed(monkeypatch):
    # BOO keeps layer norm from Inductor's decompositions to see it; a float64 layer norm (no
    # plugin serves it) and its backward must still reach Inductor decomposed. With CI set,
    # Inductor refuses to fall back to an op that has a decomposition.
    monkeypatch.setenv("CI", "1")
    torch._dynamo.reset()
    reset_offload_summary()
    model = nn.LayerNorm(6).double()
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BooFallbackWarning)
        got = torch.compile(model, backend="iree_boo_inductor")(x)
        got.sum().backward()
    expected_x = x.detach().clone().requires_grad_()
    expected = model(expected_x)
    expected.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x.grad, expected_x.grad)
    forward = offload_summary().graphs[0]
    assert not forward.offloaded and forward.fallbacks["aten.native_layer_norm"] == 1


@pytest.mark.parametrize("cuda_graphs", [True, False], ids=["graphs", "no-graphs"])
def test_a_training_backward_compiles_under_the_same_inductor_configuration_as_its_forward(monkeypatch,
                                                                                        cuda_graphs):
    """Inductor compiles a training backward at the first backward, after the backend's call
    returned: BOO's Inductor configuration (CUDA graphs, no FX graph cache) must hold there too
    (it did not: every ResNet-50 backward ran without CUDA graphs, 17.2 ms a step against 8.3)."""
    import torch._inductor.compile_fx as compile_fx_module
    from torch._inductor import config

    seen = []
    original = compile_fx_module.compile_fx_inner

    def recording(graph, inputs, **kwargs):
        seen.append((bool(kwargs.get("is_backward")), config.triton.cudagraphs, config.fx_graph_cache))
        return original(graph, inputs, **kwargs)

    monkeypatch.setattr(compile_fx_module, "compile_fx_inner", recording)
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    compiled = torch.compile(model, backend=boo_backend("inductor", cuda_graphs=cuda_graphs), dynamic=False)
    compiled(torch.randn(3, 8)).sum().backward()
    assert sorted(seen) == [(False, cuda_graphs, False), (True, cuda_graphs, False)], seen
    torch._dynamo.reset()


def test_same_shapes_do_not_recompile_and_a_new_shape_does():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("iree_boo")
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    compiled = torch.compile(model, backend=counter, dynamic=False)
    for _ in range(3):
        compiled(torch.randn(2, 3, 8, 8))
    assert counter.frame_count == 1
    again = torch.compile(model, backend=counter, dynamic=False)  # compiling the same model twice
    again(torch.randn(2, 3, 8, 8))
    assert counter.frame_count == 1
    compiled(torch.randn(2, 3, 9, 9))
    assert counter.frame_count == 2


def test_dynamic_shapes_fall_back_with_the_reason():
    torch._dynamo.reset()
    reset_offload_summary()
    model = nn.Conv2d(3, 4, 3)
    compiled = torch.compile(model, backend="iree_boo", dynamic=True)
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    forward = offload_summary().graphs[0]
    assert forward.kind == "forward" and not forward.offloaded
    assert "dynamic shapes" in forward.reasons["aten.convolution"]


def test_conv_and_activation_become_one_kernel():
    torch._dynamo.reset()
    reset_offload_summary()
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.SiLU())
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="iree_boo")(x), model(x), rtol=1e-5, atol=1e-5)
    [graph] = offload_summary().graphs
    assert graph.offloaded == {"conv.forward": 1}
    assert "aten.silu" not in graph.fallbacks


def compiled_like_eager(fn, x: torch.Tensor, backend: str):
    """``fn(x)`` compiled with ``backend`` (no gradients) equals ``fn(x)``; the offload summary."""
    torch._dynamo.reset()
    reset_offload_summary()
    with torch.no_grad():
        got = torch.compile(fn, backend=backend, dynamic=False)(x)
        torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
    return offload_summary()


@pytest.mark.parametrize("backend", BACKENDS)
def test_attentions_input_projection_takes_its_bias_into_the_kernel(backend):
    # nn.MultiheadAttention (batch first) projects its transposed, copied input as
    # add(view(mm(x, w^T)), bias): one matmul with its bias; the output projection is an addmm
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    summary = compiled_like_eager(lambda t: attention(t, t, t, need_weights=False)[0], torch.randn(3, 5, 16), backend)
    assert summary.offloaded == {"matmul.mm": 1, "matmul.addmm": 1}, summary
    assert not summary.fallbacks["aten.add"], summary


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_linear_layers_activation_after_its_view_is_in_its_kernel(backend):
    # A linear layer on a 3-D input is addmm on the rows, viewed back to 3-D: the GELU after
    # that view (a transformer's MLP) is the kernel's epilogue all the same
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).eval()
    summary = compiled_like_eager(mlp, torch.randn(3, 5, 16), backend)
    assert summary.offloaded == {"matmul.addmm": 2}, summary
    assert not summary.fallbacks["aten.gelu"], summary


class _ResidualMLP(nn.Module):
    """x + down(up(x)), then + proj(...) once more: a transformer block's two sums (without
    the MLP's activation, which the Inductor-nested backend decomposes into adds of its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down, self.proj = nn.Linear(16, 32), nn.Linear(32, 16), nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.down(self.up(x))
        return self.proj(x) + x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 16)], ids=["3-D", "2-D"])
def test_a_residual_added_to_a_linear_layer_is_in_its_kernel(backend, shape):
    # The sum after a linear layer (its view, on a 3-D input) is the kernel's C: no add is left
    torch.manual_seed(0)
    summary = compiled_like_eager(_ResidualMLP().eval(), torch.randn(shape), backend)
    assert sum(summary.offloaded.values()) == 3, summary
    assert not summary.fallbacks["aten.add"], summary


def test_a_residual_in_a_linear_layers_kernel_trains_like_eager():
    torch.manual_seed(0)
    block = _ResidualMLP()
    reference = copy.deepcopy(block)
    x = torch.randn(3, 5, 16, requires_grad=True)
    torch._dynamo.reset()
    reset_offload_summary()
    compiled = torch.compile(block, backend="iree_boo", dynamic=False)
    compiled(x).square().sum().backward()
    x_grad, x.grad = x.grad, None
    reference(x).square().sum().backward()
    torch.testing.assert_close(x_grad, x.grad, rtol=1e-5, atol=1e-5)
    for got, want in zip(block.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-5)
    assert not offload_summary().graphs[0].fallbacks["aten.add"]


class _StridedOperands(nn.Module):
    """A residual stream kept in sequence-first order behind a batch-first view (as a batch-
    first attention leaves it), a residual linear layer on it, and a class token's head:
    operands no kernel takes as they are (strided rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(16), nn.Linear(16, 16)
        self.final_norm, self.head = nn.LayerNorm(16), nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (sequence, batch, 16)
        stream = x.transpose(0, 1) * 2
        stream = stream + self.mlp(self.norm(stream))
        return self.head(self.final_norm(stream)[:, 0])


def test_strided_operands_go_through_the_bound_call_not_the_general_launch(monkeypatch):
    """Matmuls whose operands are strided rows take their bound calls, which make those
    contiguous (as the general launch does, after a lookup per call); forward and backward
    match eager."""
    from boo_ops_matmul import fusion

    general: list[str] = []
    original = fusion._Product.launch
    monkeypatch.setattr(fusion._Product, "launch", lambda self, spec, inputs: general.append(self.name) or
                        original(self, spec, inputs))
    torch.manual_seed(0)
    block = _StridedOperands()
    reference = copy.deepcopy(block)
    torch._dynamo.reset()
    reset_offload_summary()
    with settings_override(use_backward_kernels=True):
        compiled = torch.compile(block, backend="iree_boo", dynamic=False)
        for _ in range(2):
            x = torch.randn(5, 3, 16, requires_grad=True)
            got = compiled(x)
            got.square().sum().backward()
            x_grad, x.grad = x.grad, None
            want = reference(x)
            want.square().sum().backward()
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(x_grad, x.grad, rtol=1e-5, atol=1e-5)
            for p, q in zip(block.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)
                p.grad = q.grad = None
    summary = offload_summary()
    assert sum(n for name, n in summary.offloaded.items() if name.startswith("matmul.")) >= 4, summary
    assert general == [], general


def test_a_kernel_boo_cannot_compile_falls_back_with_a_warning():
    torch._dynamo.reset()
    reset_offload_summary()
    model = nn.Conv2d(3, 4, 3).double()  # BOO convolutions are f32/f16/bf16 only
    x = torch.randn(1, 3, 6, 6, dtype=torch.float64)
    with pytest.warns(BooFallbackWarning, match=r"BOO cannot take conv.forward here \(boo_conv: x has dtype "
                                                r"torch.float64; supported: f32, f16, bf16\)"):
        got = torch.compile(model, backend="iree_boo")(x)
    torch.testing.assert_close(got, model(x))
    [graph] = offload_summary().graphs
    assert graph.fallbacks["aten.convolution"] == 1 and "float64" in graph.reasons["aten.convolution"]


def test_strict_setting_raises_instead():
    torch._dynamo.reset()
    model = nn.Conv2d(3, 4, 3).double()
    strict = settings_override(compile_strict=True)
    with strict, pytest.raises(Exception, match=r"UnsupportedError: boo_conv: x has dtype torch.float64"):
        torch.compile(model, backend="iree_boo")(torch.randn(1, 3, 6, 6, dtype=torch.float64))


class ScaleByThree(FusionPattern):
    """A third-party pattern: ``aten.mul.Tensor(x, 3.0)`` on the scale op's kernel."""

    name = "scale.mul"
    anchors = (torch.ops.aten.mul.Tensor,)

    def match(self, node):
        x, factor = node.args
        if factor != 3.0 or not isinstance(x, torch.fx.Node):
            return None
        return FusionMatch((node,), (x,), {"factor": factor})

    def signatures(self, spec, inputs):
        from ..boo_core.fake_plugins.scale_op import ScaleSignature

        return [ScaleSignature(inputs[0].numel(), spec["factor"])]

    def launch(self, spec, inputs):
        from boo_core import get_launchable

        [signature] = self.signatures(spec, inputs)
        return get_launchable(signature)(inputs[0].reshape(-1)).reshape(inputs[0].shape)

    def reference(self, spec, inputs):
        return inputs[0] * spec["factor"]


@pytest.mark.parametrize("nested", ["eager", "custom"])
def test_a_third_party_plugin_adds_its_own_pattern(nested):
    from ..boo_core.fake_plugins.scale_op import ScalePlugin

    seen = []

    def custom_nested(gm, example_inputs):
        seen.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    backend = boo_backend("eager" if nested == "eager" else custom_nested)
    with isolated_registry({"scale": ScalePlugin(fusion_patterns=(ScaleByThree(),))}):
        torch._dynamo.reset()
        reset_offload_summary()
        x = torch.randn(2, 5)
        got = torch.compile(lambda t: torch.sin(t * 3.0), backend=backend)(x)
    torch.testing.assert_close(got, torch.sin(x * 3.0))
    assert offload_summary().offloaded == {"scale.mul": 1}
    if nested == "custom":
        assert torch.ops.boo.fused.default in seen[0]


def test_inductors_generated_code_calls_boo_kernels_without_the_dispatcher():
    from torch._inductor.utils import run_and_get_code

    from ..boo_core.fake_plugins.scale_op import ScalePlugin

    with isolated_registry({"scale": ScalePlugin(fusion_patterns=(ScaleByThree(),))}):
        torch._dynamo.reset()
        x = torch.randn(2, 5)
        got, codes = run_and_get_code(torch.compile(lambda t: torch.sin(t * 3.0), backend="iree_boo_inductor"), x)
        again = torch.compile(lambda t: torch.cos(t * 3.0), backend="iree_boo_inductor")(x)  # a second graph
    torch.testing.assert_close(got, torch.sin(x * 3.0))
    torch.testing.assert_close(again, torch.cos(x * 3.0))
    code = "\n".join(codes)
    assert "extern_kernels.boo_fused('scale.mul', " in code
    assert "torch.ops.boo.fused.default(" not in code


def test_backends_are_found_through_entry_points_without_importing_boo():
    code = ("import sys, torch\n"
            "from torch._dynamo import list_backends\n"
            "names = list_backends(exclude_tags=())\n"
            "print('iree_boo' in names, 'iree_boo_inductor' in names, 'boo_core' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "False"]


def test_no_warning_when_everything_compiles():
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", BooFallbackWarning)
        torch.compile(nn.Conv2d(3, 4, 3), backend="iree_boo")(torch.randn(1, 3, 6, 6))


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs", "default"])
def test_modes_are_accepted_and_off_gpus_the_graphs_run_as_they_are(mode, private_cache):
    # CUDA graphs need a GPU (tests/gpu/test_direct_launch.py records and replays them); on
    # the CPU a reduce-overhead graph runs unrecorded and gives the same results.
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    compiled = torch.compile(model, backend="iree_boo", mode=mode)
    reset_offload_summary()
    for _ in range(4):  # past the warm-up calls, where a GPU graph would be recorded
        x = torch.randn(4, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    summary = offload_summary()
    # max-autotune times each linear against torch's and leaves it to torch where torch's is faster.
    left = summary.fallbacks["aten.addmm"] if mode.startswith("max-autotune") else 0
    assert sum(summary.offloaded.values()) + left >= 2, summary
    assert not left or summary.reasons["aten.addmm"].startswith("torch's kernel is faster here ("), summary


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kwargs, message", [({"mode": "fastest"}, "unknown mode 'fastest'"),
                                             ({"options": {"epilogue_fusion": True}},
                                              "takes only the option 'triton.cudagraphs', not epilogue_fusion")])
def test_an_unknown_mode_or_option_is_an_error_naming_it(backend, kwargs, message):
    torch._dynamo.reset()
    compiled = torch.compile(nn.Linear(4, 4), backend=backend, **kwargs)
    with pytest.raises(Exception, match=message):
        compiled(torch.randn(2, 4))
