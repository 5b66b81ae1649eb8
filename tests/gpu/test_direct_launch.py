"""BOO kernels launched on torch's stream (BOO_CUDA_LAUNCH=direct): ordering across streams,
no host wait, CUDA-graph capture eager and through torch.compile(mode="reduce-overhead")."""

from __future__ import annotations

import copy
import random
import time

import pytest
import torch

from boo_core import BooOpRegistry, get_launchable
from boo_core.runtime.cuda.replay import GraphReplays
from boo_core.settings import settings_override
from boo_core.verify.numerics import check_launchable, check_outputs, poisoned
from boo_ops_conv import ConvSignature
from boo_ops_matmul import MatmulSignature

pytestmark = pytest.mark.gpu
DEVICE = "cuda:0"
f32, bf16 = torch.float32, torch.bfloat16




# One dispatch; several dispatches with a transient buffer and fills (odd-size batched
# bf16 matmul, padded); a conv with a transient; a layer norm.
KERNELS = [
    MatmulSignature(m=64, n=32, k=48),
    MatmulSignature(m=17, n=33, k=9, batch=3, trans_a=True, dtype=bf16),
    ConvSignature((2, 16, 14, 14), (32, 16, 3, 3), padding=1, dtype=bf16, shared_layout="NHWC"),
    ConvSignature((2, 16, 14, 14), (32, 16, 3, 3), padding=1, dtype=bf16, shared_layout="NHWC", mode="wrw"),
    *BooOpRegistry.parse_signatures("layernormbfp16 --input 8192x1024 -o 1 -m 1 -F 1"),
]


@pytest.mark.parametrize("signature", KERNELS, ids=lambda s: s.func_name)
def test_kernels_are_launched_directly_and_right(signature):
    launchable = get_launchable(signature, DEVICE)
    assert launchable.launch == "direct"
    failed = [str(c) for c in check_launchable(launchable) if not c.passed]
    assert not failed


def test_the_iree_route_still_serves_when_asked():
    with settings_override(cuda_launch="iree"):  # the setting is part of the launchable's key
        launchable = get_launchable(KERNELS[0], DEVICE)
        assert launchable.launch == "iree"
        assert all(c.passed for c in check_launchable(launchable))
    assert get_launchable(KERNELS[0], DEVICE).launch == "direct"


def test_a_call_returns_before_its_kernel_ends():
    signature = MatmulSignature(m=256, n=256, k=256)
    launchable = get_launchable(signature, DEVICE)
    a, b = (torch.randn(256, 256, device=DEVICE) for _ in range(2))
    launchable(a, b)
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    torch.cuda._sleep(2_000_000_000)  # about a second of GPU time queued ahead of the kernel
    start = time.perf_counter()
    y = launchable(a, b)
    host = time.perf_counter() - start
    assert not stream.query(), "the stream finished already: the call waited for the GPU"
    assert host < 0.1
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)


def test_a_plan_of_several_commands_replays_as_one_cuda_graph_where_its_buffers_repeat():
    """The second call with the same buffers records the plan's commands into a CUDA graph,
    later ones launch it: each call reads its inputs' new values and writes every output
    element (poisoned before each call); calls on other buffers run command by command."""
    signature = BooOpRegistry.parse_signatures("bnormbfp16 -n 8 -c 64 -H 14 -W 14 -L NHWC -m 1 -F 1 -s 1 -r 1")[0]
    launchable = get_launchable(signature, DEVICE)
    launcher = launchable._launcher
    assert launcher._replays is not None, "a staged batch-norm forward is several dispatches"
    args = signature.get_sample_args(device=DEVICE, seed=0)
    outputs = tuple(torch.empty(s.shape, dtype=s.dtype, device=DEVICE) for s in signature.output_specs())
    launches = []
    api = launcher._driver

    class Counting:  # the driver, counting graph launches
        def __getattr__(self, name):
            return getattr(api, name)

        def cuGraphLaunch(self, *call):
            launches.append(call)
            return api.cuGraphLaunch(*call)

    kept_replays = launcher._replays
    launcher._replays = replays = GraphReplays(Counting(), 0, signature.func_name)  # none seen or recorded yet
    # Everything allocated ahead, so that between calls nothing takes the plan's scratch memory.
    draws = [signature.get_sample_args(device=DEVICE, seed=seed) for seed in range(1, 6)]
    poison = [poisoned(o.shape, o.dtype, DEVICE) for o in outputs]
    results = [[torch.empty_like(o) for o in outputs] for _ in draws]
    try:
        for draw, kept in zip(draws, results):
            for arg, fresh in zip(args, draw):
                arg.copy_(fresh)
            for output, nan in zip(outputs, poison):
                output.copy_(nan)
            launchable(*args, out=outputs)
            for keep, output in zip(kept, outputs):
                keep.copy_(output)
        # The first call is seen, the second recorded and launched; the allocator gives the
        # later calls the same scratch memory, so they launch that graph too.
        assert replays.recorded >= 1 and len(launches) >= 3, (replays.recorded, len(launches), replays.enabled)
        for number, (draw, kept) in enumerate(zip(draws, results)):
            failed = [str(c) for c in check_outputs(signature, draw, kept) if not c.passed]
            assert not failed, (number, failed)
        fresh = signature.get_sample_args(device=DEVICE, seed=9)
        assert all(c.passed for c in check_outputs(signature, fresh, launchable(*fresh)))
    finally:
        launcher._replays = kept_replays
    with settings_override(cuda_graph_replay=False):  # part of the launchable's key: a launcher of its own
        assert get_launchable(signature, DEVICE)._launcher._replays is None


def test_producer_boo_consumer_across_two_streams_a_thousand_times():
    rng = random.Random(1234)
    shapes = [(m, n, k) for m in (1, 7, 64) for n in (5, 32) for k in (3, 48)]
    launchables = {s: get_launchable(MatmulSignature(m=s[0], n=s[1], k=s[2]), DEVICE) for s in shapes}
    producer, worker = torch.cuda.Stream(), torch.cuda.Stream()
    done = []
    for i in range(1000):
        m, n, k = shape = rng.choice(shapes)
        with torch.cuda.stream(producer):
            a = torch.randn(m, k, device=DEVICE)
            b = torch.randn(k, n, device=DEVICE)
            torch.cuda._sleep(rng.randrange(0, 20_000))  # the producer is sometimes late
            a.mul_(1 + i % 3)  # still writing a when the event is recorded after it
            ready = torch.cuda.Event()
            ready.record(producer)
        with torch.cuda.stream(worker):
            worker.wait_event(ready)
            y = launchables[shape](a, b)
            z = y * 2 + 1  # the consumer: must see the kernel's result
            a.record_stream(worker)
            b.record_stream(worker)
        done.append((a, b, z))
    torch.cuda.synchronize()
    for a, b, z in done:
        expected = (a.double() @ b.double()) * 2 + 1
        torch.testing.assert_close(z.double(), expected, rtol=1e-4, atol=1e-4)


def test_a_kernel_serving_many_buffers_per_step_records_each_set_once():
    """One kernel called on 12 sets of buffers in turn (a batch norm in 12 layers of one
    shape), four steps: each set's graph is recorded at its second call and none after; the
    graphs kept hold a whole step's sets, so none is dropped and recorded again later."""
    signature = BooOpRegistry.parse_signatures("bnormbfp16 -n 8 -c 64 -H 14 -W 14 -L NHWC -m 1 -F 1 -s 1 -r 1")[0]
    launchable = get_launchable(signature, DEVICE)
    launcher = launchable._launcher
    kept_replays = launcher._replays
    launcher._replays = replays = GraphReplays(launcher._driver, 0, signature.func_name)
    layers = [(signature.get_sample_args(device=DEVICE, seed=seed),
               tuple(torch.empty(s.shape, dtype=s.dtype, device=DEVICE) for s in signature.output_specs()))
              for seed in range(12)]
    try:
        recorded = []
        for _ in range(4):
            for args, outputs in layers:
                launchable(*args, out=outputs)
            recorded.append(replays.recordings)
        torch.cuda.synchronize()
    finally:
        launcher._replays = kept_replays
    assert recorded[0] == 0 and recorded[1] >= 1 and recorded[1] == recorded[2] == recorded[3], recorded
    for args, outputs in layers[-2:]:
        assert all(c.passed for c in check_outputs(signature, args, outputs))


@pytest.mark.parametrize("signature", KERNELS[:3], ids=lambda s: s.func_name)
def test_a_cuda_graph_captures_and_replays_boo_calls(signature):
    launchable = get_launchable(signature, DEVICE)
    inputs = [t.to(DEVICE) for t in signature.get_sample_args(device=DEVICE)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launchable(*inputs)  # warm-up off the capturing stream, as torch's docs ask
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = launchable(*inputs)
    for _ in range(3):
        for tensor in inputs:
            tensor.copy_(torch.randn_like(tensor))
        out.fill_(float("nan"))  # poisoned: a replay that writes nothing fails
        graph.replay()
        torch.cuda.synchronize()
        expected = signature.reference(*[t.double() for t in inputs])
        torch.testing.assert_close(out.double(), expected, rtol=3e-2, atol=3e-2)


def _mlp(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).to(DEVICE, dtype)


def recorded_graphs(monkeypatch) -> list:
    """The GraphedFunctions made from now on (the CUDA graphs torch.compile's graphs get)."""
    from boo_core.dynamo.cuda_graphs import GraphedFunction

    recorded: list[GraphedFunction] = []
    original = GraphedFunction.__init__

    def remember(self, *args, **kwargs):
        original(self, *args, **kwargs)
        recorded.append(self)

    monkeypatch.setattr(GraphedFunction, "__init__", remember)
    return recorded


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_torch_compile_reduce_overhead_replays_cuda_graphs_with_boo_kernels(training, monkeypatch):
    from boo_core.dynamo import offload_summary, reset_offload_summary

    torch._dynamo.reset()
    model = _mlp(f32)
    reference = _mlp(f32)
    recorded = recorded_graphs(monkeypatch)
    compiled = torch.compile(model, backend="iree_boo", mode="reduce-overhead")
    reset_offload_summary()
    for _ in range(5):
        x = torch.randn(32, 64, device=DEVICE, requires_grad=training)
        with torch.set_grad_enabled(training):
            got = compiled(x)
            want = reference(x.detach().requires_grad_(training))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        if training:
            got.sum().backward()
            want.sum().backward()
            for p, q in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
                p.grad = q.grad = None
    assert sum(offload_summary().offloaded.values()) >= 2, offload_summary()
    assert recorded and all(g.replays >= 2 for g in recorded), [(g.name, g.replays, g._failed) for g in recorded]


def test_a_replay_reads_the_parameters_memory_and_refuses_what_the_graph_was_not_recorded_for():
    """Replays check parameters by their memory only (a parameter updated in place is read
    where the graph recorded it), and the other arguments by shape, strides and dtype: a new
    parameter tensor, or an input of another shape, runs the function without the graph."""
    from boo_core.dynamo.cuda_graphs import WARMUP_CALLS, GraphedFunction

    def scale(args):
        x, w = args
        return [x * w]

    graphed = GraphedFunction(scale, "scale")
    w = torch.nn.Parameter(torch.randn(8, device=DEVICE), requires_grad=False)
    for _ in range(WARMUP_CALLS + 1):  # warm-up calls, then the recording
        graphed([torch.randn(8, device=DEVICE), w])
    assert graphed.graph is not None
    x = torch.randn(8, device=DEVICE)
    torch.testing.assert_close(graphed([x, w])[0], x * w)
    replays = graphed.replays
    with torch.no_grad():
        w.mul_(3.0)  # in place: the same memory, new values
    torch.testing.assert_close(graphed([x, w])[0], x * w)
    assert graphed.replays == replays + 1
    other = torch.nn.Parameter(torch.randn(8, device=DEVICE), requires_grad=False)
    torch.testing.assert_close(graphed([x, other])[0], x * other)  # another parameter: not replayed
    wider = torch.randn(2, 8, device=DEVICE)
    torch.testing.assert_close(graphed([wider, w])[0], wider * w)  # another shape: not replayed
    assert graphed.replays == replays + 1



@pytest.fixture
def bound_calls(monkeypatch):
    """Every KernelCall that the test's compiled graphs bind, in binding order."""
    from boo_core.dynamo.kernel_call import KernelCall

    calls: list[KernelCall] = []
    original = KernelCall.bind

    def remember(self, inputs):
        calls.append(self)
        return original(self, inputs)

    monkeypatch.setattr(KernelCall, "bind", remember)
    return calls


def test_compiled_nodes_reach_their_kernels_through_direct_calls(bound_calls):
    """A compiled graph's conv (channels-last, bias, ReLU), linear and layer norm are bound to
    direct calls that hand the graph's own tensors to the kernels and return exactly the
    layouts the graph expects; results match PyTorch; a node given other strides than it was
    bound for takes the general path, and is right too."""
    from boo_core.runtime.direct_call import DirectCall

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(64 * 8 * 8, 256), torch.nn.LayerNorm(256))
    model = model.to(DEVICE, bf16).to(memory_format=torch.channels_last).eval()
    reference = copy.deepcopy(model).float()
    compiled = torch.compile(model, backend="iree_boo", dynamic=False)
    x = torch.randn(32, 64, 8, 8, device=DEVICE, dtype=bf16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        for _ in range(3):
            x.normal_()
            got = compiled(x)
            want = reference(x.float())
            torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)
    names = sorted(c.pattern.name for c in bound_calls)
    assert names == ["conv.forward", "layernorm.forward", "matmul.addmm"], names
    assert all(isinstance(c._bound, DirectCall) and c._exact for c in bound_calls), \
        [(c.pattern.name, type(c._bound).__name__, c._exact) for c in bound_calls]
    # The graph reads only the layer norm's y: its statistics go to memory the call keeps.
    [layer_norm] = [c for c in bound_calls if c.pattern.name == "layernorm.forward"]
    assert layer_norm._bound.discarded == (1, 2)
    [conv] = [c for c in bound_calls if c.pattern.name == "conv.forward"]
    conv_module = model[0]
    nchw = x.contiguous()  # strides it was not bound for
    with torch.no_grad():
        y = conv(nchw, conv_module.weight, conv_module.bias)
        want = torch.relu(torch.nn.functional.conv2d(nchw.float(), conv_module.weight.float(),
                                                     conv_module.bias.float(), padding=1))
    assert y.stride() == conv.outputs[0].stride  # given the graph's layout all the same
    torch.testing.assert_close(y.float(), want, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("rows", ["contiguous", "sequence-first"])
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_an_inference_layer_norm_writes_its_statistics_aside_and_y_is_right(backend, mode, rows, bound_calls):
    """Layer norms whose statistics nothing reads: their direct calls write the statistics into
    memory of their own and return y alone, right at every call (each y is poisoned and freed,
    so the allocator hands its memory to the next), through Inductor too (which takes BOO's
    call as an operator with every output: the discarded ones come back unwritten), and in
    CUDA graphs: BOO's own, and Inductor's cudagraph trees, which refuse a block of their
    pool that no output holds (the statistics' memory was once made there, by the first call
    of the trees' warm-up). Rows in sequence-first order behind a batch-first shape (a
    ViT's residual stream under Inductor) go through the call made contiguous, statistics
    still set aside (they once came back as None where the graph expected tensors: every
    such layer norm fell back to PyTorch)."""
    from boo_core.plugins.patterns import ContiguousFirst
    from boo_core.runtime.direct_call import DirectCall

    torch._dynamo.reset()
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.LayerNorm(768), torch.nn.GELU(), torch.nn.LayerNorm(768))
    model = model.to(DEVICE, bf16).eval()
    reference = copy.deepcopy(model).float()
    compiled = torch.compile(model, backend=backend, dynamic=False, mode=mode)
    stored = torch.randn((4, 197, 768) if rows == "contiguous" else (197, 4, 768), device=DEVICE, dtype=bf16)
    x = stored if rows == "contiguous" else stored.transpose(0, 1)
    with torch.no_grad():
        for _ in range(4):
            stored.normal_()
            got = compiled(x)
            torch.testing.assert_close(got.float(), reference(x.float()), rtol=3e-2, atol=3e-2)
            got.fill_(float("nan"))
            del got
    bound = [c._bound for c in bound_calls if c.pattern.name == "layernorm.forward"]
    direct = [b.call if isinstance(b, ContiguousFirst) else b for b in bound]
    assert len(bound) == 2 and all(isinstance(d, DirectCall) for d in direct), [type(b).__name__ for b in bound]
    assert all(b.discarded == (1, 2) for b in bound), [b.discarded for b in bound]
    assert isinstance(bound[0], ContiguousFirst) == (rows == "sequence-first"), type(bound[0]).__name__


def _gradients_match(compiled, model: torch.nn.Module, reference: torch.nn.Module, x: torch.Tensor,
                     probe: torch.Tensor) -> None:
    """One training step of ``compiled`` (``model`` compiled) and of its float32 copy
    ``reference`` on ``x``: the parameters' gradients agree within bf16's tolerance (then cleared)."""
    (compiled(x).float() * probe).sum().backward()
    (reference(x.float()) * probe).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        scale = q.grad.abs().max().item()
        torch.testing.assert_close(p.grad.float(), q.grad, rtol=5e-2, atol=5e-2 * scale, msg=name)
        p.grad = q.grad = None


def test_compiled_training_with_backward_kernels_through_direct_calls_is_right(bound_calls):
    """The same layers in training, their gradients on BOO's kernels (conv data and weight
    gradients, layer-norm backward, matmuls): outputs and gradients match PyTorch. The
    layer norm's backward, whose three gradients are the node's values, is a direct call."""
    from boo_core.runtime.direct_call import DirectCall

    torch._dynamo.reset()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(64 * 8 * 8, 256), torch.nn.LayerNorm(256))
    model = model.to(DEVICE, bf16).to(memory_format=torch.channels_last)
    reference = copy.deepcopy(model).float()
    with settings_override(use_backward_kernels=True):
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        for _ in range(3):
            x = torch.randn(32, 64, 8, 8, device=DEVICE, dtype=bf16).contiguous(memory_format=torch.channels_last)
            probe = torch.randn(32, 256, device=DEVICE)
            _gradients_match(compiled, model, reference, x, probe)
    [backward] = [c for c in bound_calls if c.pattern.name == "layernorm.backward"]
    assert isinstance(backward._bound, DirectCall) and backward._exact


def test_layer_norms_of_sequence_first_rows_reach_their_direct_calls(bound_calls, monkeypatch):
    """A batch-first attention's residual stream lies in sequence-first order, so its layer
    norms get a non-contiguous x (and their backwards a non-contiguous dy or x): the bound
    calls make them contiguous and launch directly, never through the pattern's general
    launch; gradients match PyTorch's."""
    from boo_core.runtime.launchable import Launchable
    from boo_ops_layernorm import fusion

    checked: list[str] = []
    try_call = Launchable.try_call
    monkeypatch.setattr(Launchable, "try_call", lambda self, *args: checked.append(self.signature.func_name) or
                        try_call(self, *args))
    general: list[str] = []
    for pattern in (fusion.LayerNormForward, fusion.LayerNormBackward):
        original = pattern.launch
        monkeypatch.setattr(pattern, "launch", lambda self, spec, inputs, original=original:
                            general.append(self.name) or original(self, spec, inputs))

    class SequenceFirst(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(256, 256)
            self.norm = torch.nn.LayerNorm(256)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (sequence, batch, 256)
            return self.norm(self.linear(x).transpose(0, 1) + x.transpose(0, 1))

    torch._dynamo.reset()
    torch.manual_seed(3)
    model = SequenceFirst().to(DEVICE, bf16)
    reference = copy.deepcopy(model).float()
    with settings_override(use_backward_kernels=True):
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        for _ in range(3):
            x = torch.randn(64, 32, 256, device=DEVICE, dtype=bf16)
            probe = torch.randn(32, 64, 256, device=DEVICE)
            _gradients_match(compiled, model, reference, x, probe)
    assert general == [], general
    norms = [c for c in bound_calls if c.pattern.name.startswith("layernorm")]
    assert sorted(c.pattern.name for c in norms) == ["layernorm.backward", "layernorm.forward"]
    # every layer-norm call served by its DirectCall, none by the checked launch
    assert [name for name in checked if name.startswith("layernorm")] == [], checked


@pytest.mark.parametrize("backend", ["iree_boo", "iree_boo_inductor"])
def test_every_later_call_of_a_compiled_step_passes_the_direct_calls_cpp_check(backend, monkeypatch):
    """Under Inductor a node's first call ran under another thread dispatch state than the
    later ones, and the C++ metadata check made there missed them all: each went on to the
    slower Python check. Made again where the calls run, after the first steps no call of a
    training step (conv, batch norm + ReLU with a residual sum, linear; their gradients)
    takes the Python check, and gradients match PyTorch's."""
    from boo_core.runtime.direct_call import DirectCall

    checked: list[DirectCall] = []
    python_check = DirectCall._as_bound
    monkeypatch.setattr(DirectCall, "_as_bound", lambda self, tensors: checked.append(self) or
                        python_check(self, tensors))
    torch._dynamo.reset()
    torch.manual_seed(2)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
            self.norm = torch.nn.BatchNorm2d(64)
            self.head = torch.nn.Linear(64, 128)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.norm(self.conv(x)) + x).mean((2, 3)))

    model = Block().to(DEVICE, bf16).to(memory_format=torch.channels_last)
    reference = copy.deepcopy(model).float()
    with settings_override(use_backward_kernels=True):
        compiled = torch.compile(model, backend=backend, dynamic=False)
        for step in range(5):
            if step == 2:
                checked.clear()
            x = torch.randn(16, 64, 14, 14, device=DEVICE, dtype=bf16).contiguous(memory_format=torch.channels_last)
            probe = torch.randn(16, 128, device=DEVICE)
            _gradients_match(compiled, model, reference, x, probe)
    assert checked == [], f"{len(checked)} calls took the Python check in steps 3 to 5"


@pytest.mark.parametrize("buffers", [f32, bf16], ids=["f32_buffers", "bf16_buffers"])
def test_compiled_batch_norm_training_and_its_gradient_are_direct_calls_and_right(buffers, bound_calls):
    """A training batch norm (its momentum bound once, its running statistics read and
    written in the buffers' dtype) and its gradient go straight to their kernels and return
    exactly what the graph expects; outputs, gradients and running statistics match a float32
    PyTorch model's over three steps."""
    from boo_core.runtime.direct_call import DirectCall

    torch._dynamo.reset()
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
                                torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 1, bias=False), torch.nn.BatchNorm2d(64))
    model = model.to(DEVICE, bf16).to(memory_format=torch.channels_last)
    for module in model:
        if isinstance(module, torch.nn.BatchNorm2d):  # bf16 scale and bias; running statistics as asked
            module.running_mean = module.running_mean.to(buffers)
            module.running_var = module.running_var.to(buffers)
    reference = copy.deepcopy(model).float()
    with settings_override(use_backward_kernels=True):
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        for _ in range(3):
            x = torch.randn(16, 32, 14, 14, device=DEVICE, dtype=bf16).contiguous(memory_format=torch.channels_last)
            probe = torch.randn(16, 64, 14, 14, device=DEVICE)
            got = compiled(x)
            want = reference(x.float())
            torch.testing.assert_close(got.float(), want, rtol=5e-2, atol=5e-2)
            (got.float() * probe).sum().backward()
            (want * probe).sum().backward()
            for (name, p), q in zip(model.named_parameters(), reference.parameters()):
                scale = q.grad.abs().max().item()
                torch.testing.assert_close(p.grad.float(), q.grad, rtol=5e-2, atol=5e-2 * scale, msg=name)
                p.grad = q.grad = None
    for (name, got_buffer), want_buffer in zip(model.named_buffers(), reference.buffers()):
        if got_buffer.is_floating_point():
            assert got_buffer.dtype == buffers, name
        torch.testing.assert_close(got_buffer.to(want_buffer.dtype), want_buffer, rtol=2e-2, atol=2e-2, msg=name)
    norms = [c for c in bound_calls if c.pattern.name.startswith("bnorm.")]
    assert sorted(c.pattern.name for c in norms) == ["bnorm.backward"] * 2 + ["bnorm.training"] * 2
    assert all(isinstance(c._bound, DirectCall) and c._exact for c in norms), \
        [(c.pattern.name, type(c._bound).__name__, c._exact) for c in norms]


class _Bottleneck(torch.nn.Module):
    """A ResNet block's end: conv + batch norm, plus the input or a downsampling conv + batch
    norm of it, then a ReLU."""

    def __init__(self, downsample: bool) -> None:
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64)
        self.down = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 1, bias=False), torch.nn.BatchNorm2d(64)) \
            if downsample else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)) + (x if self.down is None else self.down(x)))


@pytest.mark.parametrize("downsample", [False, True], ids=["identity", "downsample"])
def test_a_training_batch_norm_adds_the_residual_and_applies_the_relu_in_its_direct_call(downsample, bound_calls):
    """The block's sum and ReLU run in the later batch norm's kernel (a direct call, the
    residual passed as the graph holds it). Against a float32 PyTorch model, over three steps,
    outputs, gradients and running statistics are as close as eager bf16's (ReLU masks that
    flip near 0 put the gradients of either 2-4% off by norm: measured on an H100)."""
    from boo_core.runtime.direct_call import DirectCall

    torch._dynamo.reset()
    torch.manual_seed(3)
    model = _Bottleneck(downsample).to(DEVICE, bf16).to(memory_format=torch.channels_last)
    eager, reference = copy.deepcopy(model), copy.deepcopy(model).float()

    def error(got: torch.Tensor, want: torch.Tensor) -> float:
        return float((got.float() - want).norm() / want.norm())

    with settings_override(use_backward_kernels=True, compile_strict=True):
        compiled = torch.compile(model, backend="iree_boo", dynamic=False)
        for _ in range(3):
            x = torch.randn(16, 64, 14, 14, device=DEVICE, dtype=bf16).contiguous(memory_format=torch.channels_last)
            probe = torch.randn(16, 64, 14, 14, device=DEVICE)
            outputs = [compiled(x), eager(x), reference(x.float())]
            assert error(outputs[0], outputs[2]) <= 1.5 * error(outputs[1], outputs[2]) + 1e-3
            for y in outputs:
                (y.float() * probe).sum().backward()
            for (name, p), e, q in zip(model.named_parameters(), eager.parameters(), reference.parameters()):
                assert error(p.grad, q.grad) <= 1.5 * error(e.grad, q.grad) + 1e-3, name
                p.grad = e.grad = q.grad = None
    for (name, got), e, want in zip(model.named_buffers(), eager.buffers(), reference.buffers()):
        if got.is_floating_point():
            assert error(got, want) <= 1.5 * error(e, want) + 1e-3, name
    trained = [c for c in bound_calls if c.pattern.name == "bnorm.training"]
    assert [bool(c.spec.get("residual")) for c in trained] == [False] * downsample + [True]
    assert all(isinstance(c._bound, DirectCall) and c._exact for c in trained), \
        [(type(c._bound).__name__, c._exact) for c in trained]


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_replays_read_the_models_buffers_where_they_are(training, monkeypatch):
    """A model's buffers (batch norm's running statistics) are its state as its parameters
    are: a replay reads them in place, with no copy into the graph's memory (the input is
    the only tensor copied), so a statistic changed between steps is seen, and in training
    the running statistics move as eager's do."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU()).to(DEVICE).train(training)
    reference = copy.deepcopy(model)
    recorded = recorded_graphs(monkeypatch)
    compiled = torch.compile(model, backend="iree_boo", mode="reduce-overhead")
    for step in range(6):
        x = torch.randn(4, 16, 8, 8, device=DEVICE)
        if step == 4:
            with torch.no_grad():
                for m in (model, reference):
                    m[1].running_mean.add_(0.5)
                    m[1].running_var.mul_(2.0)
        with torch.set_grad_enabled(training):
            got, want = compiled(x), reference(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(model[1], name), getattr(reference[1], name), rtol=1e-5, atol=1e-5)
    forward = [g for g in recorded if "backward" not in g.name]
    assert forward and all(g.replays >= 2 for g in forward), [(g.name, g.replays, g._failed) for g in recorded]
    assert all(len(g._copied) == 1 for g in forward), [(g.name, g._copied) for g in forward]
