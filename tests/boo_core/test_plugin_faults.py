"""Broken plugins never take healthy ops down (issue 19).

Each scenario installs fake distributions (real ``*.dist-info`` folders on ``sys.path``, plus
plugin modules written for the test) whose plugins break the contract in one way. Then:

* the broken plugin is named: ``boo ops`` lists it and exits 1 (faults at load time), or
  using its op raises an error naming it (faults in what an op does), or ``boo ops`` reports
  the conflict naming both plugins (names claimed twice);
* every healthy op (conv, matmul, layernorm, the softmax example) still parses, compiles and
  runs right: its kernel against the float64 reference.

Decision: a ``KeyboardInterrupt`` raised by a plugin is the user's, not the plugin's, and
propagates (the process ends as interrupted); everything else, ``SystemExit`` included, is
isolated.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from boo_core import (
    BooFallbackWarning,
    BooOpRegistry,
    CompileError,
    OpRegistry,
    PluginError,
    clear_launchables,
    get_launchable,
)
from boo_core.dynamo import offload_summary, reset_offload_summary
from boo_core.kernels.request import KernelRequest
from boo_core.kernels.target import Target
from boo_core.testing import assert_numerics, write_fake_distribution
from boo_core.tools.cli import main

from ..conftest import REPO

FAULTY = "tests.boo_core.fake_plugins.faulty"
BOO = str(Path(sys.executable).parent / "boo")
CPU = Target.parse("cpu")

#: One small command per healthy op; each must keep working whatever else is installed.
HEALTHY = {
    "conv": "conv -n 1 -c 3 -H 8 -W 8 -k 4 -y 3 -x 3 -p 1 -q 1 -F 1",
    "matmul": "gemm -m 3 -n 4 -k 5",
    "layernorm": "layernorm -X 4x16 -o 1 -m 1 -F 1",
    "softmax": "softmax -n 2 -c 8 -H 4 -W 4 -a 1 -m 1 -F 1",
}


@dataclass(frozen=True)
class Fault:
    """Fake distributions ``{name: {entry point: value}}`` (and modules written beside
    them); ``reported`` are regexes of the lines ``boo ops`` must print; ``unusable`` are
    the healthy ops the fault makes unusable (a conflict), with the error they give."""

    id: str
    dists: dict[str, dict[str, str]]
    reported: tuple[str, ...]
    modules: dict[str, str] = field(default_factory=dict)
    unusable: dict[str, str] = field(default_factory=dict)


def failed(stage: str, plugin: str, dist: str, error: str) -> str:
    return rf'failed: Error {stage} plugin "{plugin}" \({dist} 1\.0\): {error}'


def module(name: str, source: str) -> dict[str, str]:
    return {name: source}


LOAD_FAULTS = [
    # -- at import ---------------------------------------------------------------------------
    Fault("sys.exit at import", {"boo-fault-exit": {"exit": "boo_fault_exit"}},
          (failed("importing", "exit", "boo-fault-exit", r"called sys\.exit\(3\)\n"),),
          module("boo_fault_exit", f"from {FAULTY} import exit_now\nexit_now()\n")),
    Fault("BaseException subclass at import", {"boo-fault-base": {"base": "boo_fault_base"}},
          (failed("importing", "base", "boo-fault-base", "PluginBoom: boom"),),
          module("boo_fault_base", "class PluginBoom(BaseException):\n    pass\n\n\nraise PluginBoom('boom')\n")),
    Fault("GeneratorExit at import", {"boo-fault-genexit": {"genexit": "boo_fault_genexit"}},
          (failed("importing", "genexit", "boo-fault-genexit", "GeneratorExit: odd"),),
          module("boo_fault_genexit", "raise GeneratorExit('odd')\n")),
    Fault("exception at import", {"boo-fault-raise": {"raise": "boo_fault_raise"}},
          (failed("importing", "raise", "boo-fault-raise", "RuntimeError: import exploded on purpose"),),
          module("boo_fault_raise", "raise RuntimeError('import exploded on purpose')\n")),
    Fault("syntax error", {"boo-fault-syntax": {"syntax": "boo_fault_syntax"}},
          (failed("importing", "syntax", "boo-fault-syntax", "SyntaxError: "),),
          module("boo_fault_syntax", "def broken(:\n")),
    Fault("missing module", {"boo-fault-nomodule": {"nomodule": "boo_fault_no_such_module"}},
          (failed("importing", "nomodule", "boo-fault-nomodule", "ModuleNotFoundError: "),)),
    Fault("missing attribute", {"boo-fault-noattr": {"noattr": f"{FAULTY}:NO_SUCH_NAME"}},
          (failed("importing", "noattr", "boo-fault-noattr", "AttributeError: "),)),
    Fault("malformed entry point", {"boo-fault-malformed": {"malformed": "not a valid!! reference"}},
          (failed("importing", "malformed", "boo-fault-malformed", ""),)),
    Fault("registry used at import", {"boo-fault-reentrant": {"reentrant": "boo_fault_reentrant"}},
          (failed("importing", "reentrant", "boo-fault-reentrant", "PluginError: the op registry is being built"),),
          module("boo_fault_reentrant", "from boo_core import BooOpRegistry\n\n"
                                        "BooOpRegistry.parse_command('conv -n 1 -F 1')\n")),
    # -- the entry point is not a plugin -----------------------------------------------------
    Fault("entry point is a number", {"boo-fault-number": {"number": f"{FAULTY}:NUMBER"}},
          (failed("validating", "number", "boo-fault-number",
                  "PluginError: the entry point loads int 42, not a module or object with hooks"),)),
    Fault("entry point is a function", {"boo-fault-function": {"function": f"{FAULTY}:boo_register_ops"}},
          (failed("validating", "function", "boo-fault-function",
                  r"PluginError: function <function boo_register_ops .*> implements no BOO hook"),)),
    Fault("entry point is a class", {"boo-fault-class": {"klass": f"{FAULTY}:CLASS_NOT_INSTANCE"}},
          (failed("registering", "klass", "boo-fault-class", "TypeError: .*missing 1 required positional"),)),
    Fault("hook with a wrong parameter", {"boo-fault-param": {"param": f"{FAULTY}:WRONG_PARAMETER"}},
          (failed("validating", "param", "boo-fault-param", r"PluginValidationError: Plugin 'param@boo-fault-param' "
                  r"for hook 'boo_register_ops' hookimpl definition: boo_register_ops\(registry\) Argument\(s\) "
                  r"\{'registry'\} are declared in the hookimpl but can not be found in the hookspec"),)),
    # -- registration ------------------------------------------------------------------------
    Fault("register(None)", {"boo-fault-none": {"none": f"{FAULTY}:REGISTER_NONE"}},
          (failed("registering", "none", "boo-fault-none",
                  "TypeError: register\\(\\) takes a boo_core.OpSpec, got NoneType"),)),
    Fault("register(42)", {"boo-fault-int": {"int": f"{FAULTY}:REGISTER_INT"}},
          (failed("registering", "int", "boo-fault-int",
                  r"TypeError: register\(\) takes a boo_core.OpSpec, got int"),)),
    Fault("register('conv')", {"boo-fault-str": {"str": f"{FAULTY}:REGISTER_STRING"}},
          (failed("registering", "str", "boo-fault-str",
                  r"TypeError: register\(\) takes a boo_core.OpSpec, got str"),)),
    Fault("register with extra arguments", {"boo-fault-args": {"args": f"{FAULTY}:REGISTER_EXTRA_ARGUMENTS"}},
          (failed("registering", "args", "boo-fault-args",
                  r"TypeError: register\(\) takes one boo_core.OpSpec, got 2 arguments"),)),
    Fault("registers, then raises", {"boo-fault-half": {"half": f"{FAULTY}:REGISTER_THEN_RAISE"}},
          (failed("registering", "half", "boo-fault-half", "RuntimeError: failed half way"),)),
    Fault("registers, then sys.exit", {"boo-fault-halfexit": {"halfexit": f"{FAULTY}:REGISTER_THEN_EXIT"}},
          (failed("registering", "halfexit", "boo-fault-halfexit", r"called sys\.exit\(4\)\n"),)),
    Fault("registers one op twice", {"boo-fault-twice": {"twice": f"{FAULTY}:REGISTER_TWICE"}},
          (failed("registering", "twice", "boo-fault-twice", "PluginError: op 'twice' registered twice"),)),
    Fault("returns its specs", {"boo-fault-returns": {"returns": f"{FAULTY}:RETURNS_SPECS"}},
          (failed("registering", "returns", "boo-fault-returns",
                  "PluginError: boo_register_ops returned a list; it must call register"),)),
    Fault("generator hook", {"boo-fault-gen": {"gen": f"{FAULTY}:GENERATOR_HOOK"}},
          (failed("registering", "gen", "boo-fault-gen",
                  r"PluginError: boo_register_ops returned a generator \(a generator function: its body "
                  r"never ran\)"),)),
    Fault("invalid OpSpec", {"boo-fault-spec": {"spec": f"{FAULTY}:INVALID_SPEC"}},
          (failed("registering", "spec", "boo-fault-spec", "ValueError: op name 'Not A Name' must be lowercase"),)),
    Fault("signature class of another op", {"boo-fault-mismatch": {"mismatch": f"{FAULTY}:MISMATCHED_SIGNATURE"}},
          (failed("registering", "mismatch", "boo-fault-mismatch",
                  "ValueError: op 'other': ScaleSignature.op_name is 'scale', not 'other'"),)),
    Fault("registry used while registering", {"boo-fault-uses": {"uses": f"{FAULTY}:USES_REGISTRY"}},
          (failed("registering", "uses", "boo-fault-uses", "PluginError: the op registry is being built"),)),
    # -- fusion patterns refused by OpSpec ---------------------------------------------------
    Fault("pattern that is no FusionPattern", {"boo-fault-notpat": {"notpat": f"{FAULTY}:PATTERN_NOT_A_PATTERN"}},
          (failed("registering", "notpat", "boo-fault-notpat",
                  "TypeError: op 'not_pattern': fusion_patterns holds a object, not a FusionPattern"),)),
    Fault("pattern with bad anchors", {"boo-fault-anchors": {"anchors": f"{FAULTY}:PATTERN_BAD_ANCHORS"}},
          (failed("registering", "anchors", "boo-fault-anchors",
                  "TypeError: op 'bad_anchors': fusion pattern bad_anchors.conv has anchors 42"),)),
    Fault("pattern named like conv's", {"boo-fault-stolen": {"stolen": f"{FAULTY}:PATTERN_STOLEN_NAME"}},
          (failed("registering", "stolen", "boo-fault-stolen",
                  "ValueError: op 'stealer': fusion pattern StolenName has name 'conv.forward'"),)),
    # -- names and distributions -------------------------------------------------------------
    Fault("third-party entry point 'conv' loading boo_ops_conv.hooks, first on sys.path",
          {"boo-fault-shadow": {"conv": "boo_ops_conv.hooks"}},
          (failed("validating", "conv", "boo-fault-shadow",
                  r"PluginError: it loads module boo_ops_conv.hooks, which "
                  r'plugin "conv" \(boo-ops-conv 0.1.0\) already registered'),)),
    Fault("third-party entry point 'conv' with an op named conv",
          {"boo-fault-impostor": {"conv": f"{FAULTY}:IMPOSTOR_CONV"}},
          (r'conflict: op name \'conv\' is claimed by plugin "conv" \(boo-fault-impostor 1.0\) '
           r'and plugin "conv" \(boo-ops-conv 0.1.0\)',
           r'conflict: command keyword \'conv\' is claimed by plugin "conv" \(boo-fault-impostor 1.0\) '
           r'and plugin "conv" \(boo-ops-conv 0.1.0\)'),
          unusable={"conv": r"command keyword of 'conv' is claimed by .*; uninstall one, or skip one with "
                            r"BOO_DISABLE_PLUGINS=conv@boo-fault-impostor or conv@boo-ops-conv"}),
    Fault("a second op claiming keyword gemm", {"boo-fault-gemm": {"mygemm": f"{FAULTY}:KEYWORD_GEMM"}},
          (r"conflict: command keyword 'gemm' is claimed by plugin \"(matmul|mygemm)\"",),
          unusable={"matmul": r"command keyword of 'gemm' is claimed by"}),
    Fault("two distributions registering op 'dup'",
          {"boo-fault-dup-a": {"dupa": f"{FAULTY}:DUPLICATE_NAME_A"},
           "boo-fault-dup-b": {"dupb": f"{FAULTY}:DUPLICATE_NAME_B"}},
          (r'conflict: op name \'dup\' is claimed by plugin "dupa" \(boo-fault-dup-a 1.0\) and plugin "dupb"',
           r"conflict: command keyword 'dup' is claimed by")),
    Fault("keyword convb: convbfp16 reads two ways", {"boo-fault-convb": {"convb": f"{FAULTY}:KEYWORD_CONVB"}},
          (r'conflict: base argument \'convbfp16\' reads as \'conv\' \+ \'bfp16\' \(plugin "conv" '
           r'\(boo-ops-conv 0.1.0\)\) and as \'convb\' \+ \'fp16\' \(plugin "convb" \(boo-fault-convb 1.0\)\)',)),
    Fault("unreadable entry_points.txt", {"boo-fault-unreadable": {"x": "y"}},
          (r"failed: Error reading the entry points of distribution .*boo_fault_unreadable-1.0.dist-info: "
           r"TypeError: ",)),
    Fault("distribution without METADATA", {"boo-fault-nameless": {"nameless": f"{FAULTY}:REGISTER_FLOAT"}},
          (r'failed: Error registering plugin "nameless" \(boo_fault_nameless-1.0.dist-info \(no version\)\): '
           r"TypeError: register\(\) takes a boo_core.OpSpec, got float",)),
]

#: What ``import torch`` itself cannot survive, so no fresh BOO process can either.
KILLS_TORCH = ("unreadable entry_points.txt",)


@pytest.fixture
def site(tmp_path, monkeypatch) -> Iterator[Path]:
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    yield directory
    for name in [m for m in sys.modules if m.startswith("boo_fault_")]:
        del sys.modules[name]


def install(site: Path, fault: Fault) -> None:
    for name, entry_points in fault.dists.items():
        write_fake_distribution(site, name, "1.0", entry_points)
    for name, source in fault.modules.items():
        (site / f"{name}.py").write_text(source)
    if "boo-fault-unreadable" in fault.dists:
        (site / "boo_fault_unreadable-1.0.dist-info" / "entry_points.txt").write_text("[boo]\nno equals sign\n")
    if "boo-fault-nameless" in fault.dists:
        (site / "boo_fault_nameless-1.0.dist-info" / "METADATA").unlink()


@contextmanager
def fresh_default() -> Iterator[OpRegistry]:
    """The process default registry, rebuilt from what is installed now (restored after)."""
    previous = BooOpRegistry.reset()
    clear_launchables()
    try:
        yield BooOpRegistry.default()
    finally:
        BooOpRegistry.reset(previous)
        clear_launchables()


def assert_healthy(registry: OpRegistry, skip: set[str] = frozenset()) -> None:
    """Every healthy op parses, loads its kernel (compiled on the session cache's first
    miss) and computes right."""
    for op, command in HEALTHY.items():
        if op in skip:
            continue
        signature = registry.parse_command(command)
        assert registry.op_for_signature(signature).plugin.distribution == f"boo-ops-{op}"
        clear_launchables()
        assert_numerics(signature)


@pytest.mark.parametrize("fault", LOAD_FAULTS, ids=[f.id for f in LOAD_FAULTS])
def test_a_broken_plugin_is_named_and_healthy_ops_keep_working(site, fault, capsys):
    install(site, fault)
    with fresh_default() as registry:
        assert main(["ops"]) == 1
        out = capsys.readouterr().out
        for pattern in fault.reported:
            assert re.search(pattern, out), f"{pattern!r} not in:\n{out}"
        for op in HEALTHY:
            assert re.search(rf"^{op} +keywords: ", out, re.MULTILINE), out
        for op, message in fault.unusable.items():
            with pytest.raises(PluginError, match=message):
                registry.parse_command(HEALTHY[op])
        assert_healthy(registry, skip=set(fault.unusable))


def test_a_plugin_that_registers_then_fails_registers_nothing(site):
    install(site, LOAD_FAULTS[[f.id for f in LOAD_FAULTS].index("registers, then raises")])
    with fresh_default() as registry:
        assert "half_registered" not in [e.name for e in registry.list_ops()]


def test_a_first_party_entry_point_is_not_displaced_by_a_namesake_first_on_sys_path(site, boo_env):
    install(site, next(f for f in LOAD_FAULTS if f.id.endswith("first on sys.path")))
    with fresh_default() as registry:
        assert registry.get_op("conv").distribution == "boo-ops-conv 0.1.0"
    # An impostor's conflict is resolved by disabling it by its key, which names its distribution.
    install(site, next(f for f in LOAD_FAULTS if f.id.endswith("with an op named conv")))
    boo_env(BOO_DISABLE_PLUGINS="conv@boo-fault-impostor,conv@boo-fault-shadow")
    with fresh_default() as registry:
        assert registry.conflicts() == [] and registry.failures == []
        assert_healthy(registry)


def test_ambiguous_base_argument_is_refused_and_the_rest_of_conv_works(site):
    install(site, next(f for f in LOAD_FAULTS if f.id.startswith("keyword convb")))
    with fresh_default() as registry:
        with pytest.raises(PluginError, match=r"command keyword of 'convbfp16' is claimed by plugin .*conv"):
            registry.parse_command(HEALTHY["conv"].replace("conv", "convbfp16", 1))
        assert registry.parse_command(HEALTHY["conv"].replace("conv", "convfp16", 1)).dtype == torch.float16
        assert registry.parse_command("convb -n 3").size == 3


def test_keyboard_interrupt_in_a_plugin_is_the_users_and_propagates(site):
    (site / "boo_fault_interrupt.py").write_text("raise KeyboardInterrupt\n")
    write_fake_distribution(site, "boo-fault-interrupt", "1.0", {"interrupt": "boo_fault_interrupt"})
    with pytest.raises(KeyboardInterrupt), fresh_default():
        pass


def test_keyboard_interrupt_in_an_ops_code_or_a_librarys_build_is_the_users_and_propagates():
    from boo_core.kernels.formulation import Formulation
    from boo_core.plugins.manager import PluginInfo, call_blamed
    from boo_core.substitute import Substitution

    from .fake_plugins.scale_op import ScaleSignature

    def interrupt(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        call_blamed(PluginInfo("x"), "op 'x' formulations", interrupt)
    with pytest.raises(KeyboardInterrupt):
        Substitution("library", build=interrupt, key="k").materialize(None)
    with pytest.raises(KeyboardInterrupt):
        Formulation("own", mlir=interrupt).source(ScaleSignature(4))


# -- faults in what an op does: named when the op is used ---------------------------------------


@dataclass(frozen=True)
class UseFault:
    """A plugin that loads but whose op misbehaves: ``error`` (a regex naming the plugin)
    when its command runs, or None when BOO copes (then ``check`` runs on the launchable)."""

    id: str
    attribute: str
    error: tuple[type[Exception], str] | None


def blamed(plugin: str) -> str:
    return rf'plugin "{plugin}" \(boo-fault-{plugin} 1.0\)'


USE_FAULTS = [
    UseFault("compile_flags returns 42", "FLAGS_INT",
             (PluginError, blamed("flags_int") + r": op 'flags_int' compile_flags must return a list, tuple or "
                                                 r"generator of iree-compile flags .*got 42")),
    UseFault("compile_flags raises", "FLAGS_RAISE",
             (PluginError, blamed("flags_raise") + " failed in op 'flags_raise' compile_flags: RuntimeError: "
                                                   "flags exploded on purpose")),
    UseFault("compile_flags calls sys.exit", "FLAGS_EXIT",
             (PluginError, blamed("flags_exit") + r" failed in op 'flags_exit' compile_flags: called sys\.exit\(5\)")),
    UseFault("compile_flags returns a non-flag", "FLAGS_NOT_FLAGS",
             (PluginError, blamed("flags_text") + r": .* got \('O3',\)")),
    UseFault("compile_flags returns a set", "FLAGS_SET",
             (PluginError, blamed("flags_set") + r": .*got \{'--iree-opt-level=O1'\}")),
    UseFault("compile_flags returns a generator", "FLAGS_GENERATOR", None),
    UseFault("formulations returns 42", "FORMULATIONS_INT",
             (PluginError, blamed("forms_int") + ": op 'forms_int' formulations must return a non-empty sequence")),
    UseFault("formulations returns strings", "FORMULATIONS_STRINGS",
             (PluginError, blamed("forms_text") + ": op 'forms_text' formulations returned str, not Formulation")),
    UseFault("formulations calls sys.exit", "FORMULATIONS_EXIT",
             (PluginError, blamed("forms_exit") + r" failed in op 'forms_exit' formulations: called sys\.exit\(6\)")),
    UseFault("formulations is a generator", "FORMULATIONS_GENERATOR", None),
    UseFault("a formulation's mlir() returns 42", "MLIR_INT",
             (CompileError, r"formulation 'own' of scale_fwd_f32_n4_f2 \(" + blamed("mlir_int") +
              r"\) could not make its MLIR: TypeError: .*mlir\(\) returned int, not str")),
    UseFault("a formulation's mlir() calls sys.exit", "MLIR_EXIT",
             (CompileError, r"formulation 'own' of scale_fwd_f32_n4_f2 \(" + blamed("mlir_exit") +
              r"\) could not make its MLIR: called sys\.exit\(7\)")),
    UseFault("a broken formulation, then the default", "MLIR_INT_THEN_DEFAULT", None),
    UseFault("the reference raises in export", "REFERENCE_RAISES",
             (CompileError, blamed("ref_raises") + r"\) could not make its MLIR: .*reference exploded on purpose")),
    UseFault("the parser raises", "PARSER_BUG",
             (PluginError, blamed("parser_bug") + " failed parsing 'parser_bug -n 4': ZeroDivisionError")),
    UseFault("the parser calls sys.exit", "PARSER_EXIT",
             (PluginError, blamed("parser_exit") + r" failed parsing 'parser_exit -n 4': "
                                                   r"called sys\.exit\('the parser gave up'\)")),
    UseFault("register() called after the hook returned", "KEEPS_REGISTER",
             (PluginError, r'plugin "late" \(boo-fault-late 1.0\) called register\(\) after its boo_register_ops')),
]


def use_fault_plugin(fault: UseFault) -> tuple[str, str]:
    """The op (and entry-point) name of a use fault's plugin, and its distribution."""
    from .fake_plugins import faulty

    plugin = getattr(faulty, fault.attribute)
    name = "late" if fault.attribute == "KEEPS_REGISTER" else plugin.calls[0][0][0].name
    return name, f"boo-fault-{name}"


@pytest.mark.parametrize("fault", USE_FAULTS, ids=[f.id for f in USE_FAULTS])
def test_a_misbehaving_op_is_blamed_on_its_plugin_when_used(site, fault, capsys, tmp_path):
    name, dist = use_fault_plugin(fault)
    write_fake_distribution(site, dist, "1.0", {name: f"{FAULTY}:{fault.attribute}"})
    command = f"{name} -n 4"
    with fresh_default() as registry:
        assert registry.failures == [] and registry.conflicts() == []  # it loads: only using it tells
        clear_launchables()
        if fault.error is None:
            signature = registry.parse_command(command)
            assert_numerics(signature)
            if fault.attribute == "FLAGS_GENERATOR":  # not silently dropped: in the flags and the key
                request = KernelRequest.create(signature, CPU)
                assert "--iree-opt-level=O1" in request.flags and "--iree-opt-level=O1" in request.key.material["flags"]
            if fault.attribute == "MLIR_INT_THEN_DEFAULT":
                launchable = get_launchable(signature)
                assert launchable.formulation == "default"
                [attempt] = launchable.passed_over
                assert attempt.formulation == "own" and "could not make its MLIR" in attempt.detail
        else:
            error, message = fault.error
            with pytest.raises(error, match=message):
                get_launchable(registry.parse_command(command))
        # boo driver: the broken command is reported naming the plugin, the healthy ones run.
        commands = tmp_path / "commands.txt"
        commands.write_text("\n".join([command, *HEALTHY.values()]) + "\n")
        status = main(["driver", "--iter", "1", "--warmup", "0", "--verify-numerics", "--commands-file", str(commands)])
        out = capsys.readouterr().out
        assert out.count("PASS") >= len(HEALTHY) + (fault.error is None), out
        if fault.error is None:
            assert status == 0, out
        else:
            assert status == 1 and re.search(fault.error[1].split(r"\)")[0], out), out
        assert_healthy(registry)


# -- fusion patterns at torch.compile time ------------------------------------------------------


class ConvReluSin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.sin(torch.relu(self.conv(x)))


PATTERN_FAULTS = {"bad_match": "PATTERN_RAISES", "bad_garbage": "PATTERN_GARBAGE",
                  "bad_signatures": "PATTERN_SIGNATURES_RAISE", "bad_launch": "PATTERN_LAUNCH_RAISES"}


@pytest.mark.parametrize("backend", ["iree_boo", pytest.param("iree_boo_inductor", marks=pytest.mark.slow)])
def test_broken_fusion_patterns_do_not_break_torch_compile_of_conv_relu(site, backend):
    for name, attribute in PATTERN_FAULTS.items():
        write_fake_distribution(site, f"boo-fault-{name}", "1.0", {name: f"{FAULTY}:{attribute}"})
    model, x = ConvReluSin().eval(), torch.randn(2, 3, 8, 8)
    with fresh_default() as registry, torch.no_grad():
        assert registry.failures == [] and registry.conflicts() == []
        # The broken patterns come first (op names sort before conv): each is refused, then conv's matches.
        assert [p.name for p in registry.fusion_patterns()][:4] == [
            "bad_garbage.conv", "bad_launch.sin", "bad_match.conv", "bad_signatures.conv"]
        torch._dynamo.reset()
        reset_offload_summary()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.compile(model, backend=backend, dynamic=False)(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
        summary = offload_summary()
        assert summary.offloaded["conv.forward"] == 1, summary
        messages = [str(w.message) for w in caught if issubclass(w.category, BooFallbackWarning)]
        assert any("bad_signatures.conv" in m and "signatures exploded on purpose" in m for m in messages), messages
        assert any("bad_launch.sin failed at run time (ZeroDivisionError: launch exploded" in m for m in messages)
        torch._dynamo.reset()


class Sin(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2


def test_fusion_patterns_that_call_sys_exit_are_refused_and_pytorch_computes(site):
    for name in ("EXITS_IN_MATCH", "EXITS_IN_SIGNATURES", "EXITS_IN_LAUNCH"):
        write_fake_distribution(site, f"boo-fault-{name.lower()}", "1.0",
                                {name.lower(): f"{FAULTY}:PATTERN_{name}"})
    model, x = Sin(), torch.randn(16)
    with fresh_default() as registry, torch.no_grad():
        assert registry.failures == [] and registry.conflicts() == []
        assert [p.name for p in registry.fusion_patterns() if p.name.startswith("exit_")] == [
            "exit_a_match.sin", "exit_b_signatures.sin", "exit_c_launch.sin"]  # tried on sin in this order
        torch._dynamo.reset()
        reset_offload_summary()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.compile(model, backend="iree_boo", dynamic=False)(x)
        torch.testing.assert_close(got, model(x))
        summary = offload_summary()
        assert summary.offloaded["exit_c_launch.sin"] == 1, summary  # the only one that got that far
        reasons = [g.reasons.get("aten.sin", "") for g in summary.graphs]
        assert "pattern exit_a_match.sin failed to match: called sys.exit(4)" in reasons, reasons
        messages = [str(w.message) for w in caught if issubclass(w.category, BooFallbackWarning)]
        assert "BOO cannot take exit_b_signatures.sin here (called sys.exit(5)); it runs on the nested backend" \
            in messages, messages
        assert "BOO kernel for exit_c_launch.sin failed at run time (called sys.exit(6)); computing it with PyTorch" \
            in messages, messages
        torch._dynamo.reset()


# -- the boo command, as a subprocess -----------------------------------------------------------


def boo(site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    return subprocess.run([BOO, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def test_boo_ops_and_driver_with_every_broken_plugin_installed_at_once(site, tmp_path):
    # Not installed: the conflicts that make a healthy op unusable (tested above), and a
    # malformed entry_points.txt, which makes `import torch` fail in a fresh process
    # (torch/__init__.py reads every distribution's entry points), before BOO runs.
    installed = [f for f in LOAD_FAULTS if not f.unusable and f.id not in KILLS_TORCH]
    for fault in installed:
        install(site, fault)
    for fault in USE_FAULTS:
        name, dist = use_fault_plugin(fault)
        write_fake_distribution(site, dist, "1.0", {name: f"{FAULTY}:{fault.attribute}"})

    ops = boo(site, "ops")
    assert ops.returncode == 1, ops.stderr
    for fault in installed:
        for pattern in fault.reported:
            assert re.search(pattern, ops.stdout), f"{pattern!r} not in:\n{ops.stdout}"
    for op in HEALTHY:
        assert re.search(rf"^{op} +keywords: .* from boo-ops-{op} 0.1.0$", ops.stdout, re.MULTILINE), ops.stdout

    commands = tmp_path / "commands.txt"
    commands.write_text("\n".join([*HEALTHY.values(), *(f"{use_fault_plugin(f)[0]} -n 4" for f in USE_FAULTS)]))
    driver = boo(site, "driver", "--iter", "1", "--warmup", "0", "--verify-numerics", "--commands-file", str(commands))
    assert driver.returncode == 1, driver.stderr
    assert "Traceback" not in driver.stdout + driver.stderr
    failing = sum(f.error is not None for f in USE_FAULTS)
    assert f"{failing} failed" in driver.stdout
    assert driver.stdout.count("PASS") >= len(HEALTHY) + len(USE_FAULTS) - failing
    assert 'plugin "exit" (boo-fault-exit 1.0): called sys.exit(3); the plugin is skipped' in driver.stderr

    healthy = tmp_path / "healthy.txt"
    healthy.write_text("\n".join(HEALTHY.values()))
    driver = boo(site, "driver", "--iter", "1", "--warmup", "0", "--verify-numerics", "--commands-file", str(healthy))
    assert driver.returncode == 0, driver.stdout + driver.stderr
    assert driver.stdout.count("PASS") >= len(HEALTHY)


def test_boo_exits_as_interrupted_when_a_plugin_raises_keyboard_interrupt(site):
    (site / "boo_fault_interrupt.py").write_text("raise KeyboardInterrupt\n")
    write_fake_distribution(site, "boo-fault-interrupt", "1.0", {"interrupt": "boo_fault_interrupt"})
    result = boo(site, "ops")
    assert result.returncode in (-2, 130), (result.returncode, result.stderr)
    assert "KeyboardInterrupt" in result.stderr


def test_an_op_whose_reference_or_sample_inputs_call_sys_exit_fails_its_kernel_not_the_process(private_cache,
                                                                                                 monkeypatch):
    """Signature methods are the op's code too: verification and the tools report a
    ``sys.exit()`` in them against that kernel and go on."""
    from boo_core.settings import settings_override
    from boo_core.signatures.commands import Command
    from boo_core.testing import isolated_registry
    from boo_core.tools.driver import DriverOptions, run_command

    from .fake_plugins import scale_op
    from .fake_plugins.scale_op import ScaleSignature

    def exits(*args, **kwargs):
        sys.exit(5)

    with isolated_registry({"scale": scale_op}):
        get_launchable(ScaleSignature(41))  # compiled (the export runs the reference) before it breaks
        clear_launchables()
        monkeypatch.setattr(ScaleSignature, "reference", exits)
        # Checked in this process (the worker does not see this test's patch; there a sys.exit() is the same verdict).
        with settings_override(verify="all", worker=False), pytest.warns(BooFallbackWarning,
                                                                          match=r"called sys\.exit\(5\)"):
            get_launchable(ScaleSignature(41))
        monkeypatch.setattr(ScaleSignature, "get_sample_args", exits)
        result = run_command(Command("scale -n 42 -i 1", "command line"), DriverOptions())
        [run] = result.runs
        assert "called sys.exit(5)" in run.error
