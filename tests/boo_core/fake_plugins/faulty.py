"""Plugins that each break the contract in one way, for tests/boo_core/test_plugin_faults.py.

An entry point names one of them as ``tests.boo_core.fake_plugins.faulty:NAME``. Their ops are
the scale op (``scale_op``) under a name and keyword of their own, so that they never clash
with each other or with the real ops unless a scenario wants them to.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from boo_core import BooOpRegistry, FusionMatch, FusionPattern, OpSpec, hookimpl
from boo_core.kernels.formulation import Formulation

from .scale_op import SPEC, ScaleParser, ScaleSignature

aten = torch.ops.aten


def variant(name: str, **behaviour: Any) -> OpSpec:
    """The scale op as op ``name`` (keyword ``name``, a signature class of its own)."""
    signature_class = dataclass(frozen=True)(type(f"{name}_signature", (ScaleSignature,), {"op_name": name}))
    parser_class = type(f"{name}_parser", (ScaleParser,), {"signature_class": signature_class})
    fields = {"keywords": (name,), "parser": parser_class(), **behaviour}
    return replace(SPEC, name=name, signature_class=signature_class, **fields)


class Registers:
    """A plugin whose ``boo_register_ops`` calls ``register(*args, **kwargs)`` for each call
    given, then raises ``then_raise`` if set."""

    def __init__(self, *calls: tuple[tuple, dict], then_raise: BaseException | None = None) -> None:
        self.calls, self.then_raise = calls, then_raise

    @hookimpl
    def boo_register_ops(self, register):
        for args, kwargs in self.calls:
            register(*args, **kwargs)
        if self.then_raise is not None:
            raise self.then_raise


def registers(*specs: object) -> Registers:
    return Registers(*(((spec,), {}) for spec in specs))


# -- faults at registration ------------------------------------------------------------------------

REGISTER_NONE = registers(None)
REGISTER_INT = registers(42)
REGISTER_FLOAT = registers(1.5)
REGISTER_STRING = registers("conv")
REGISTER_EXTRA_ARGUMENTS = Registers(((variant("extra_args"), "oops"), {}))
REGISTER_THEN_RAISE = Registers(((variant("half_registered"),), {}), then_raise=RuntimeError("failed half way"))
REGISTER_THEN_EXIT = Registers(((variant("half_exited"),), {}), then_raise=SystemExit(4))
REGISTER_TWICE = registers(variant("twice"), variant("twice"))


class ReturnsSpecs:
    """Returns its specs instead of registering them."""

    @hookimpl
    def boo_register_ops(self, register):
        return [variant("returned")]


class GeneratorHook:
    """A generator function as the hook: calling it runs nothing."""

    @hookimpl
    def boo_register_ops(self, register):
        yield register(variant("never_registered"))


class WrongParameter:
    """The hook takes a parameter the specification does not have."""

    @hookimpl
    def boo_register_ops(self, registry):
        registry(variant("wrong_parameter"))


class InvalidSpec:
    """Builds an OpSpec that fails its own validation."""

    @hookimpl
    def boo_register_ops(self, register):
        register(replace(SPEC, name="Not A Name"))


class MismatchedSignature:
    """Registers op ``other`` with the scale op's signature class (whose op_name is scale)."""

    @hookimpl
    def boo_register_ops(self, register):
        register(replace(SPEC, name="other", keywords=("other",)))


class UsesRegistryWhileRegistering:
    """Parses a command while the registry is being built (would wait on itself forever)."""

    @hookimpl
    def boo_register_ops(self, register):
        BooOpRegistry.parse_command("conv -n 1 -F 1")


class KeepsRegister:
    """Keeps the register callback and calls it later, from its op's formulations."""

    def __init__(self) -> None:
        self.register = None

    @hookimpl
    def boo_register_ops(self, register):
        self.register = register
        register(variant("late", formulations=self.late))

    def late(self, signature, target):
        self.register(variant("late_extra"))
        return (Formulation("default"),)


RETURNS_SPECS = ReturnsSpecs()
GENERATOR_HOOK = GeneratorHook()
WRONG_PARAMETER = WrongParameter()
INVALID_SPEC = InvalidSpec()
MISMATCHED_SIGNATURE = MismatchedSignature()
USES_REGISTRY = UsesRegistryWhileRegistering()
KEEPS_REGISTER = KeepsRegister()
NUMBER = 42
CLASS_NOT_INSTANCE = Registers


def boo_register_ops(register):
    """A function named like the hook but not marked @hookimpl (the entry point names it)."""
    register(variant("function_entry"))


# -- fusion patterns -------------------------------------------------------------------------------


class RaisesInMatch(FusionPattern):
    """Anchored on convolutions, raises for every node it is offered."""

    name = "bad_match.conv"
    anchors = (aten.convolution.default,)

    def match(self, node):
        raise RuntimeError("match exploded on purpose")

    def signatures(self, spec, inputs):
        return ()

    def launch(self, spec, inputs):
        raise AssertionError("never matched")

    def reference(self, spec, inputs):
        raise AssertionError("never matched")


class ReturnsGarbage(RaisesInMatch):
    """Returns a FusionMatch of things that are not nodes, then a number."""

    name = "bad_garbage.conv"

    def match(self, node):
        return FusionMatch(nodes=(1, 2), inputs=("x",), spec={}) if node.name.endswith("n") else 42


class SignaturesRaise(RaisesInMatch):
    """Matches a convolution, then fails to say which kernels it needs."""

    name = "bad_signatures.conv"

    def match(self, node):
        return FusionMatch(nodes=(node,), inputs=(node.args[0], node.args[1]), spec={"whatever": 1})

    def signatures(self, spec, inputs):
        raise TypeError("signatures exploded on purpose")


class LaunchRaises(FusionPattern):
    """Takes ``aten.sin`` and fails at run time: PyTorch must compute it instead."""

    name = "bad_launch.sin"
    anchors = (aten.sin.default,)

    def match(self, node):
        return FusionMatch(nodes=(node,), inputs=(node.args[0],), spec={})

    def signatures(self, spec, inputs):
        return ()

    def launch(self, spec, inputs):
        raise ZeroDivisionError("launch exploded on purpose")

    def reference(self, spec, inputs):
        return torch.sin(inputs[0])


class BadAnchors(RaisesInMatch):
    name = "bad_anchors.conv"
    anchors = 42


class StolenName(RaisesInMatch):
    name = "conv.forward"  # the conv op's pattern name


PATTERN_RAISES = registers(variant("bad_match", fusion_patterns=(RaisesInMatch(),)))
PATTERN_GARBAGE = registers(variant("bad_garbage", fusion_patterns=(ReturnsGarbage(),)))
PATTERN_SIGNATURES_RAISE = registers(variant("bad_signatures", fusion_patterns=(SignaturesRaise(),)))
PATTERN_LAUNCH_RAISES = registers(variant("bad_launch", fusion_patterns=(LaunchRaises(),)))


class ExitsInMatch(LaunchRaises):
    """Takes ``aten.sin``, then calls ``sys.exit`` when offered a node."""

    name = "exit_a_match.sin"

    def match(self, node):
        sys.exit(4)


class ExitsInSignatures(LaunchRaises):
    """Matches ``aten.sin``, then calls ``sys.exit`` to say which kernels it needs."""

    name = "exit_b_signatures.sin"

    def signatures(self, spec, inputs):
        sys.exit(5)


class ExitsInLaunch(LaunchRaises):
    """Matches ``aten.sin`` and calls ``sys.exit`` at run time."""

    name = "exit_c_launch.sin"

    def launch(self, spec, inputs):
        sys.exit(6)


PATTERN_EXITS_IN_MATCH = registers(variant("exit_a_match", fusion_patterns=(ExitsInMatch(),)))
PATTERN_EXITS_IN_SIGNATURES = registers(variant("exit_b_signatures", fusion_patterns=(ExitsInSignatures(),)))
PATTERN_EXITS_IN_LAUNCH = registers(variant("exit_c_launch", fusion_patterns=(ExitsInLaunch(),)))


class PatternSpec:
    """Builds an op whose fusion_patterns field is ``patterns`` (validation refuses it)."""

    def __init__(self, name: str, patterns: object) -> None:
        self.name, self.patterns = name, patterns

    @hookimpl
    def boo_register_ops(self, register):
        register(variant(self.name, fusion_patterns=self.patterns))


PATTERN_NOT_A_PATTERN = PatternSpec("not_pattern", [object()])
PATTERN_BAD_ANCHORS = PatternSpec("bad_anchors", [BadAnchors()])
PATTERN_STOLEN_NAME = PatternSpec("stealer", [StolenName()])


# -- faults when an op is used ---------------------------------------------------------------------


def _generated_flags(signature, target):
    yield "--iree-opt-level=O1"


def _generated_formulations(signature, target):
    yield Formulation("default")


def _raise(error: BaseException):
    def function(*args):
        raise error

    return function


def _exit(code: int):
    def function(*args):
        sys.exit(code)

    return function


FLAGS_INT = registers(variant("flags_int", compile_flags=lambda s, t: 42))
FLAGS_RAISE = registers(variant("flags_raise", compile_flags=_raise(RuntimeError("flags exploded on purpose"))))
FLAGS_NOT_FLAGS = registers(variant("flags_text", compile_flags=lambda s, t: ["O3"]))
FLAGS_SET = registers(variant("flags_set", compile_flags=lambda s, t: {"--iree-opt-level=O1"}))
FLAGS_GENERATOR = registers(variant("flags_gen", compile_flags=_generated_flags))
FORMULATIONS_INT = registers(variant("forms_int", formulations=lambda s, t: 42))
FORMULATIONS_STRINGS = registers(variant("forms_text", formulations=lambda s, t: ["default"]))
FORMULATIONS_GENERATOR = registers(variant("forms_gen", formulations=_generated_formulations))
MLIR_INT = registers(variant("mlir_int", formulations=lambda s, t: (Formulation("own", mlir=lambda: 42),)))
MLIR_INT_THEN_DEFAULT = registers(variant("mlir_then_default", formulations=lambda s, t: (
    Formulation("own", mlir=lambda: 42), Formulation("default"))))
FLAGS_EXIT = registers(variant("flags_exit", compile_flags=_exit(5)))
FORMULATIONS_EXIT = registers(variant("forms_exit", formulations=_exit(6)))
MLIR_EXIT = registers(variant("mlir_exit", formulations=lambda s, t: (Formulation("own", mlir=_exit(7)),)))
REFERENCE_RAISES = registers(variant("ref_raises", formulations=lambda s, t: (
    Formulation("default", computation=_raise(ValueError("reference exploded on purpose"))),)))


class ParserBug(ScaleParser):
    def build(self, flags, *, base, dtype):
        return [1 / 0]


class ParserExits(ScaleParser):
    def build(self, flags, *, base, dtype):
        sys.exit("the parser gave up")


_PARSER_EXIT = variant("parser_exit")
PARSER_EXIT = registers(replace(_PARSER_EXIT, parser=type("parser_exit_parser", (ParserExits,), {
    "signature_class": _PARSER_EXIT.signature_class})()))
_PARSER_BUG = variant("parser_bug")
PARSER_BUG = registers(replace(_PARSER_BUG, parser=type("parser_bug_parser", (ParserBug,), {
    "signature_class": _PARSER_BUG.signature_class})()))


# -- names other plugins own ---------------------------------------------------------------------


@dataclass(frozen=True)
class ImpostorConvSignature(ScaleSignature):
    op_name: ClassVar[str] = "conv"


class ImpostorConvParser(ScaleParser):
    signature_class = ImpostorConvSignature


IMPOSTOR_CONV = registers(replace(SPEC, name="conv", keywords=("conv",), signature_class=ImpostorConvSignature,
                                  parser=ImpostorConvParser()))
KEYWORD_GEMM = registers(variant("my_gemm", keywords=("gemm",)))
KEYWORD_CONVB = registers(variant("convb"))
DUPLICATE_NAME_A = registers(variant("dup"))
DUPLICATE_NAME_B = registers(variant("dup"))


def exit_now() -> None:
    """Used by a module written at test time: ``sys.exit`` from plugin code."""
    sys.exit(3)
