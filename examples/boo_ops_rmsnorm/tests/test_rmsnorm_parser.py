"""``rmsnorm`` commands: flags, defaults, directions, run flags, round trips and errors."""

from __future__ import annotations

import pytest
import torch

from boo_core.plugin import BooOpRegistry, CommandError, UnsupportedError
from boo_core.testing import assert_round_trip
from boo_ops_rmsnorm import RMSNormSignature as S

f16, bf16 = torch.float16, torch.bfloat16


def parse(command: str) -> list[S]:
    return BooOpRegistry.parse_signatures(command)


def test_a_full_command_gives_its_signature():
    assert BooOpRegistry.parse_command("rmsnorm -N 8 -W 4096 -e 1e-6 -F 1") == S(8, 4096, 1e-6)
    assert BooOpRegistry.parse_command("rmsnormbfp16 --in_n 3 --in_w 7 --eps 0 --forw 2") == S(3, 7, 0.0, bf16, "bwd")


def test_defaults_and_f_0_run_forward_and_backward():
    assert parse("rmsnormfp16") == [S(100, 32, 1e-5, f16), S(100, 32, 1e-5, f16, "bwd")]


@pytest.mark.parametrize("forw, modes", [("0", ["fwd", "bwd"]), ("1", ["fwd"]), ("2", ["bwd"]), ("3", ["fwd", "bwd"])])
def test_f_is_a_bitmask_of_forward_and_backward(forw, modes):
    assert [s.mode for s in parse(f"rmsnorm -N 2 -W 3 -F {forw}")] == modes


def test_run_flags_go_to_the_tools():
    assert BooOpRegistry.default().parse("rmsnorm -N 2 -i 7 -V 0 -t 1 -w 1 -F 1").run_options == {
        "iter": 7, "verify": 0, "time": 1, "wall": 1}


@pytest.mark.parametrize("signature", [
    S(8, 4096, 1e-6),
    S(3, 7, 0.0, bf16, "bwd"),
    S(1, 1, 0.125, f16),
], ids=lambda s: s.func_name)
def test_to_command_parses_back_to_the_signature(signature):
    assert_round_trip(signature)


@pytest.mark.parametrize("command, error, message", [
    ("rmsnorm -N 0", CommandError, r"^flag -N/--in_n 0 must be at least 1$"),
    ("rmsnorm -N 2147483648", CommandError, r"^flag -N/--in_n 2147483648 must be at most 2147483647$"),
    ("rmsnorm -W -3", CommandError, r"^flag -W/--in_w -3 must be at least 1$"),
    ("rmsnorm -W 1.5", CommandError, r"^bad value '1.5' for flag -W/--in_w: expected an integer$"),
    ("rmsnorm -e -1e-5", CommandError, r"^flag -e/--eps -1e-05 must not be negative$"),
    ("rmsnorm -e 1e39", CommandError,
     r"^flag -e/--eps 1e\+39 is out of f32.s range \(magnitude at most 3.40282e\+38\): it is added in float32$"),
    ("rmsnorm -e nan", CommandError, r"^flag -e/--eps nan must be finite$"),
    ("rmsnorm -e x", CommandError, r"^bad value 'x' for flag -e/--eps: expected a number$"),
    ("rmsnorm -F 4", CommandError, r"^flag -F/--forw 4 must be at most 3$"),
    ("rmsnorm -F -1", CommandError, r"^flag -F/--forw -1 must not be negative$"),
    ("rmsnorm -i 0", CommandError, r"^flag -i/--iter 0 must be at least 1$"),
    ("rmsnorm -C 3", CommandError, r"^unknown flag -C$"),
    ("rmsnormfp64 -N 2", UnsupportedError, r"^base argument 'rmsnormfp64': rmsnorm does not support f64 "
                                           r"\(supported: f32, f16, bf16\)$"),
])
def test_bad_commands_name_the_flag_at_fault(command, error, message):
    with pytest.raises(error, match=message):
        parse(command)


@pytest.mark.parametrize("fields, error, message", [
    (dict(rows=0, size=1), ValueError, r"^rows must be a positive integer, got 0$"),
    (dict(rows=1, size=2.0), ValueError, r"^size must be a positive integer, got 2.0$"),
    (dict(rows=1, size=1, eps=float("inf")), ValueError, r"^eps must be finite, got inf$"),
    (dict(rows=1, size=1, eps=-0.5), ValueError, r"^eps -0.5 must not be negative$"),
    (dict(rows=1, size=1, eps=1e39), ValueError, r"^eps 1e\+39 is out of f32's range"),
    (dict(rows=1, size=1, mode="wrw"), ValueError, r"^mode 'wrw' must be one of fwd, bwd$"),
    (dict(rows=1, size=1, dtype=torch.float64), UnsupportedError, r"^rmsnorm dtype torch.float64 is not supported"),
])
def test_invalid_signatures_are_refused(fields, error, message):
    with pytest.raises(error, match=message):
        S(**fields)


def test_an_integer_eps_is_the_same_signature_and_kernel_name():
    assert S(2, 3, 0) == S(2, 3, 0.0) and S(2, 3, 0).func_name == S(2, 3, 0.0).func_name
