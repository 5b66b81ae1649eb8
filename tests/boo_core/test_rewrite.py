"""The FX rewrite pass of the torch.compile backends, on hand-made aten graphs (no dynamo)."""

from __future__ import annotations

import time

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from boo_core import Decline, FusionMatch, FusionPattern, get_launchable, node_arguments
from boo_core.dynamo.kernel_call import KernelCall
from boo_core.dynamo.rewrite import rewrite
from boo_core.plugins.patterns import conversion_of, only_user
from boo_core.settings import settings_override
from boo_core.testing import isolated_registry

from .fake_plugins.scale_op import ScalePlugin, ScaleSignature

aten = torch.ops.aten


class MulByConstant(FusionPattern):
    """``aten.mul.Tensor(x, c)`` on the scale kernel; declines c == 0 and raises for c == 13."""

    name = "scale.mul"
    anchors = (aten.mul.Tensor,)

    def match(self, node):
        arguments = node_arguments(node)
        factor = arguments["other"]
        if not isinstance(factor, float):
            return None
        if factor == 0.0:
            return Decline("multiplying by zero is not worth a kernel")
        if factor == 13.0:
            raise RuntimeError("unlucky")
        return FusionMatch((node,), (arguments["self"],), {"factor": factor})

    def signatures(self, spec, inputs):
        return [ScaleSignature(inputs[0].numel(), spec["factor"])]

    def launch(self, spec, inputs):
        [signature] = self.signatures(spec, inputs)
        return get_launchable(signature)(inputs[0].reshape(-1)).reshape(inputs[0].shape)

    def reference(self, spec, inputs):
        return inputs[0] * spec["factor"]


class MulThenSin(FusionPattern):
    """Matches ``mul`` and the ``sin`` after it as one kernel (whatever else uses the mul)."""

    name = "scale.mul_sin"
    anchors = (aten.mul.Tensor,)

    def match(self, node):
        user = next(iter(node.users))
        return FusionMatch((node, user), (node.args[0],), {"factor": node.args[1]})

    signatures = MulByConstant.signatures
    launch = MulByConstant.launch
    reference = MulByConstant.reference


def graph(fn, *shapes):
    return make_fx(fn, tracing_mode="fake")(*(torch.randn(s) for s in shapes))


@pytest.fixture
def patterns(private_cache):
    def use(*found):
        return isolated_registry({"scale": ScalePlugin(fusion_patterns=found)})

    return use


def calls(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_match_becomes_one_kernel_call_that_computes_the_same(patterns):
    gm = graph(lambda x: torch.sin(x * 3.0), (4, 5))
    with patterns(MulByConstant()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
        x = torch.randn(4, 5)
        torch.testing.assert_close(gm(x), torch.sin(x * 3.0))
    assert report.offloaded == {"scale.mul": 1} and report.fallbacks == {"aten.sin": 1}
    [kernel, sin] = calls(gm)
    assert isinstance(kernel, KernelCall) and kernel.spec == {"factor": 3.0} and sin is aten.sin.default


def test_as_a_custom_op_the_call_is_torch_ops_boo_fused(patterns):
    gm = graph(lambda x: x * 3.0, (6,))
    with patterns(MulByConstant()):
        rewrite(gm, backend="test", kind="forward", as_custom_op=True)
        x = torch.randn(6)
        torch.testing.assert_close(gm(x), x * 3.0)
    assert torch.ops.boo.fused.default in calls(gm)


def test_declines_and_broken_patterns_leave_the_node_and_say_why(patterns):
    gm = graph(lambda x: (x * 0.0) + (x * 13.0), (3,))
    with patterns(MulByConstant()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
    assert report.offloaded == {} and report.fallbacks == {"aten.mul": 2, "aten.add": 1}
    assert report.reasons["aten.mul"] == "pattern scale.mul declined: multiplying by zero is not worth a kernel"
    assert "declined: multiplying by zero" in report.line()
    x = torch.randn(3)
    torch.testing.assert_close(gm(x), x * 13.0)


def test_a_pattern_s_exception_is_recorded_not_raised(patterns):
    gm = graph(lambda x: x * 13.0, (3,))
    with patterns(MulByConstant()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
    assert report.reasons["aten.mul"] == "pattern scale.mul failed to match: RuntimeError: unlucky"


def test_a_match_whose_inner_values_are_used_elsewhere_is_refused(patterns):
    def fn(x):
        y = x * 2.0
        return torch.sin(y) + y.sum()

    gm = graph(fn, (3,))
    with patterns(MulThenSin()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
    assert report.offloaded == {}
    assert "matched nodes whose values are used elsewhere" in report.reasons["aten.mul"]


def test_backward_graphs_are_left_alone_unless_asked(patterns):
    gm = graph(lambda x: x * 3.0, (3,))
    with patterns(MulByConstant()):
        report = rewrite(gm, backend="test", kind="backward", as_custom_op=False)
    # the default, auto, puts no op's gradients on BOO's kernels on the CPU
    assert report.offloaded == {} and "BOO_USE_BACKWARD_KERNELS=auto on cpu" in report.note
    with patterns(MulByConstant()), settings_override(use_backward_kernels=False):
        report = rewrite(graph(lambda x: x * 3.0, (3,)), backend="test", kind="backward", as_custom_op=False)
    assert report.offloaded == {} and "BOO_USE_BACKWARD_KERNELS=0 on cpu" in report.note


class BoundMul(MulByConstant):
    """MulByConstant with its launch settled ahead (``bind``); counts which path ran."""

    name = "scale.mul_bound"

    def __init__(self, bind_fails: bool = False):
        self.bind_fails = bind_fails
        self.launches = self.bound_runs = self.binds = 0

    def launch(self, spec, inputs):
        self.launches += 1
        return super().launch(spec, inputs)

    def bind(self, spec, inputs):
        self.binds += 1
        if self.bind_fails:
            raise ValueError("cannot bind")
        [signature] = self.signatures(spec, inputs)
        launchable = get_launchable(signature)
        shape = tuple(inputs[0].shape)

        def run(x):
            self.bound_runs += 1
            y = launchable.try_call(x.view(-1)) if x.is_contiguous() else None
            return None if y is None else y.view(shape)

        return run


@pytest.mark.parametrize("as_custom_op", [False, True])
def test_a_bound_pattern_is_bound_when_the_graph_compiles_and_launch_is_left_for_odd_tensors(patterns, as_custom_op):
    pattern = BoundMul()
    gm = graph(lambda x: x * 2.5, (4, 6))
    with patterns(pattern):
        rewrite(gm, backend="test", kind="inference", as_custom_op=as_custom_op)
        assert pattern.binds == 1 and pattern.launches == 0  # bound ahead, from the fake tensors
        for _ in range(3):
            x = torch.randn(4, 6)
            torch.testing.assert_close(gm(x), x * 2.5)
        assert (pattern.bound_runs, pattern.launches) == (3, 0)
        odd = torch.randn(6, 4).t()  # the compiled shape, other strides: the bound run declines it
        torch.testing.assert_close(gm(odd), odd * 2.5)
        assert (pattern.bound_runs, pattern.launches) == (4, 1)


def test_a_bound_launch_is_not_used_while_autograd_records(patterns):
    pattern = BoundMul()
    gm = graph(lambda x: x * 2.5, (5,))
    with patterns(pattern):
        rewrite(gm, backend="test", kind="inference", as_custom_op=False)
        x = torch.randn(5, requires_grad=True)
        gm(x)
    assert (pattern.bound_runs, pattern.launches) == (0, 1)


def test_a_pattern_that_fails_to_bind_is_launched_the_general_way(patterns, caplog):
    pattern = BoundMul(bind_fails=True)
    gm = graph(lambda x: x * 2.5, (5,))
    with patterns(pattern):
        rewrite(gm, backend="test", kind="inference", as_custom_op=False)
        x = torch.randn(5)
        torch.testing.assert_close(gm(x), x * 2.5)
    assert pattern.launches == 1 and "could not bind its launch (ValueError: cannot bind)" in caplog.text


class TimedMul(BoundMul):
    """BoundMul whose BOO side or torch side is made slow on purpose."""

    def __init__(self, slow: str):
        super().__init__()
        self.slow = slow
        self.name = f"scale.mul_slow_{slow}"

    def bind(self, spec, inputs):
        run = super().bind(spec, inputs)

        def slowed(x):
            if self.slow == "boo":
                time.sleep(0.002)
            return run(x)

        return slowed

    def reference(self, spec, inputs):
        if self.slow == "torch":
            time.sleep(0.002)
        return super().reference(spec, inputs)


@pytest.mark.parametrize("slow", ["boo", "torch"])
def test_autotune_leaves_a_node_to_torch_only_where_torch_s_kernel_is_faster(patterns, slow):
    pattern = TimedMul(slow)
    gm = graph(lambda x: x * 1.5, (64,))
    with patterns(pattern):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False, autotune=True)
        x = torch.randn(64)
        torch.testing.assert_close(gm(x), x * 1.5)
    if slow == "boo":
        assert report.offloaded == {} and report.fallbacks == {"aten.mul": 1}
        assert report.reasons["aten.mul"].startswith("torch's kernel is faster here (")
    else:
        assert report.offloaded == {pattern.name: 1} and not report.reasons


def test_autotune_offers_backward_graphs_and_keeps_only_gradients_that_are_not_slower(patterns):
    pattern = TimedMul("torch")
    gm = graph(lambda x: x * 1.5, (64,))
    with patterns(pattern):
        report = rewrite(gm, backend="test", kind="backward", as_custom_op=False, autotune=True)
    assert report.offloaded == {pattern.name: 1} and not report.note


class SlowMulThenSin(TimedMul):
    """TimedMul that also takes the ``sin`` after the mul: the match's root is not its anchor."""

    def match(self, node):
        found = super().match(node)
        user = next(iter(node.users))
        return FusionMatch((node, user), found.inputs, found.spec) if user.target is aten.sin.default else found

    def reference(self, spec, inputs):
        return torch.sin(super().reference(spec, inputs))

    def bind(self, spec, inputs):
        run = super().bind(spec, inputs)
        return lambda x: torch.sin(run(x))


def test_autotune_records_why_under_the_anchor_op_that_the_summary_counts_as_left(patterns):
    pattern = SlowMulThenSin("boo")
    gm = graph(lambda x: torch.sin(x * 1.5), (64,))
    with patterns(pattern):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False, autotune=True)
        x = torch.randn(64)
        torch.testing.assert_close(gm(x), torch.sin(x * 1.5))
    assert report.fallbacks == {"aten.mul": 1, "aten.sin": 1}
    assert report.reasons["aten.mul"].startswith("torch's kernel is faster here (")


class VarMeanConverting(FusionPattern):
    """``aten.var_mean`` with the conversion of its mean taken into the call (computed with
    torch: no kernel needed to test the graph's surgery). ``claim`` names what to give as
    as applied: the mean's conversion, or (malformed) the var's getitem itself."""

    name = "scale.var_mean"
    anchors = (aten.var_mean.correction,)

    def __init__(self, claim="conversion"):
        self.claim = claim

    def match(self, node):
        items = {user.args[1]: user for user in node.users}
        conversion = conversion_of(items[1])
        applied = (conversion,) if self.claim == "conversion" else (items[0],)
        return FusionMatch((node,), (node.args[0],), {"dtype": str(conversion.meta["val"].dtype)}, applied)

    def signatures(self, spec, inputs):
        return []

    def launch(self, spec, inputs):
        var, mean = torch.var_mean(inputs[0], 0)
        return var, mean.to(getattr(torch, spec["dtype"].removeprefix("torch.")))

    def reference(self, spec, inputs):
        return self.launch(spec, inputs)


@pytest.mark.parametrize("as_custom_op", [False, True], ids=["callable", "custom_op"])
def test_a_conversion_of_the_root_s_value_joins_the_kernel_call(patterns, as_custom_op):
    """The call gives the mean in the dtype the graph converted it to, and the conversion
    node is gone: what read it reads the call's value."""
    gm = graph(lambda x: [t * 2 for t in (lambda v, m: (v, m.to(torch.float64)))(*torch.var_mean(x, 0))], (5, 3))
    assert aten._to_copy.default in calls(gm)
    with patterns(VarMeanConverting()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=as_custom_op)
        x = torch.randn(5, 3)
        var, mean = gm(x)
    assert report.offloaded == {"scale.var_mean": 1} and aten._to_copy.default not in calls(gm)
    assert mean.dtype == torch.float64 and var.dtype == torch.float32
    torch.testing.assert_close(mean, x.double().mean(0) * 2)
    torch.testing.assert_close(var, x.var(0) * 2)


def test_a_match_applying_what_is_not_a_function_of_a_root_value_is_refused(patterns):
    gm = graph(lambda x: (lambda v, m: (v, m.to(torch.float64)))(*torch.var_mean(x, 0)), (5, 3))
    with patterns(VarMeanConverting(claim="item")):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
    assert report.offloaded == {}
    assert "not a function of one of the root's values" in report.reasons["aten.var_mean"]


class VarMeanShifted(FusionPattern):
    """``torch.var_mean`` whose mean has a tensor added and a ReLU applied, the three one
    call: a chain of applied nodes, the first reading an input of the match (a residual sum)."""

    name = "scale.var_mean_shifted"
    anchors = (aten.var_mean.correction,)

    def match(self, node):
        mean = next(user for user in node.users if user.args[1] == 1)
        add = only_user(mean)
        relu = only_user(add)
        shift = next(a for a in add.args if a is not mean)
        return FusionMatch((node,), (node.args[0], shift), {}, (add, relu))

    def signatures(self, spec, inputs):
        return []

    def launch(self, spec, inputs):
        var, mean = torch.var_mean(inputs[0], 0)
        return var, torch.relu(mean + inputs[1])

    def reference(self, spec, inputs):
        return self.launch(spec, inputs)


@pytest.mark.parametrize("as_custom_op", [False, True], ids=["callable", "custom_op"])
@pytest.mark.parametrize("shifted", [lambda m, s: m + s, lambda m, s: s + m], ids=["m+s", "s+m"])
def test_a_chain_of_applied_nodes_reading_an_earlier_input_joins_the_kernel_call(patterns, as_custom_op, shifted):
    gm = graph(lambda x, s: [t * 2 for t in (lambda v, m: (v, torch.relu(shifted(m, s))))(*torch.var_mean(x, 0))],
               (5, 3), (3,))
    with patterns(VarMeanShifted()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=as_custom_op)
        x, s = torch.randn(5, 3), torch.randn(3)
        var, mean = gm(x, s)
    assert report.offloaded == {"scale.var_mean_shifted": 1}
    assert aten.add.Tensor not in calls(gm) and aten.relu.default not in calls(gm)
    torch.testing.assert_close(mean, torch.relu(x.mean(0) + s) * 2)
    torch.testing.assert_close(var, x.var(0) * 2)


def test_an_applied_node_reading_a_value_made_after_the_root_is_refused(patterns):
    # the kernel call takes the root's place: a value computed after it cannot be its input
    gm = graph(lambda x: (lambda v, m: (v, torch.relu(m + x.sum(0))))(*torch.var_mean(x, 0)), (5, 3))
    with patterns(VarMeanShifted()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
        x = torch.randn(5, 3)
        torch.testing.assert_close(gm(x)[1], torch.relu(x.mean(0) + x.sum(0)))
    assert report.offloaded == {}
    assert "inputs made before the root" in report.reasons["aten.var_mean"]


class VarMeanOfRelu(FusionPattern):
    """``torch.var_mean(relu(x))`` as one call that also gives ``relu(x)``, which the graph
    reads elsewhere too: an exposed node."""

    name = "scale.var_mean_of_relu"
    anchors = (aten.var_mean.correction,)

    def match(self, node):
        relu = node.args[0]
        return FusionMatch((relu, node), (relu.args[0],), {}, exposed=(relu,))

    def signatures(self, spec, inputs):
        return []

    def launch(self, spec, inputs):
        y = torch.relu(inputs[0])
        return (*torch.var_mean(y, 0), y)

    def reference(self, spec, inputs):
        return self.launch(spec, inputs)


@pytest.mark.parametrize("as_custom_op", [False, True], ids=["callable", "custom_op"])
def test_an_exposed_node_read_after_the_root_is_given_by_the_kernel_call(patterns, as_custom_op):
    def f(x):
        y = torch.relu(x)
        var, mean = torch.var_mean(y, 0)
        return var * 2, mean, y * 3

    gm = graph(f, (5, 3))
    with patterns(VarMeanOfRelu()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=as_custom_op)
        x = torch.randn(5, 3)
        var, mean, tripled = gm(x)
    assert report.offloaded == {"scale.var_mean_of_relu": 1} and aten.relu.default not in calls(gm)
    torch.testing.assert_close(tripled, torch.relu(x) * 3)
    torch.testing.assert_close(var, torch.relu(x).var(0) * 2)
    torch.testing.assert_close(mean, torch.relu(x).mean(0))


def test_an_exposed_node_read_before_the_root_is_refused(patterns):
    def f(x):
        y = torch.relu(x)
        tripled = y * 3  # read before the var_mean: the kernel call, in its place, would come too late
        return (*torch.var_mean(y, 0), tripled)

    gm = graph(f, (5, 3))
    with patterns(VarMeanOfRelu()):
        report = rewrite(gm, backend="test", kind="inference", as_custom_op=False)
        x = torch.randn(5, 3)
        torch.testing.assert_close(gm(x)[2], torch.relu(x) * 3)
    assert report.offloaded == {}
    assert "reads before the kernel runs" in report.reasons["aten.var_mean"]
