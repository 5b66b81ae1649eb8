"""MIOpenDriver softmax commands: flags, defaults, directions, round trips and errors."""

from __future__ import annotations

import pytest
import torch

from boo_core.plugin import BooOpRegistry, CommandError, UnsupportedError
from boo_core.testing import assert_round_trip
from boo_ops_softmax import SoftmaxSignature as S


def parse(command: str) -> list[S]:
    return BooOpRegistry.parse_signatures(command)


def test_a_full_command_gives_its_signature():
    assert BooOpRegistry.parse_command("softmax -n 2 -c 8 -H 4 -W 4 -a 1 -m 1 -F 1") == S(2, 8, 4, 4)
    assert BooOpRegistry.parse_command(
        "softmaxbfp16 --batchsize 3 --in_channels 5 --in_h 7 --in_w 1 --algorithm 2 --mode 0 --alpha 0.5 "
        "--beta 2 --forw 2") == S(3, 5, 7, 1, "log", "instance", 0.5, 2.0, torch.bfloat16, "bwd")


def test_defaults_are_miopens_and_f_0_runs_forward_and_backward():
    assert parse("softmax") == [S(100, 3, 32, 32), S(100, 3, 32, 32, mode="bwd")]


@pytest.mark.parametrize("forw, modes", [("0", ["fwd", "bwd"]), ("1", ["fwd"]), ("2", ["bwd"]), ("3", ["fwd", "bwd"]),
                                         ("4", ["bwd"])])
def test_f_follows_miopendrivers_rule(forw, modes):
    assert [s.mode for s in parse(f"softmax -n 2 -c 3 -F {forw}")] == modes


def test_layout_nchw_is_accepted_in_either_case():
    assert parse("softmaxfp16 -n 2 -c 3 -L nchw -F 1") == [S(2, 3, 32, 32, dtype=torch.float16)]


def test_run_flags_go_to_the_tools():
    assert BooOpRegistry.default().parse("softmax -n 2 -i 7 -V 0 -t 1 -w 1 -F 1").run_options == {
        "iter": 7, "verify": 0, "time": 1, "wall": 1}


@pytest.mark.parametrize("signature", [
    S(2, 8, 4, 4),
    S(3, 5, 7, 1, "log", "instance", 0.5, 2.0, torch.bfloat16, "bwd"),
    S(1, 1, algorithm="fast", alpha=-1e-05, beta=0.1, dtype=torch.float16),
], ids=lambda s: s.func_name)
def test_to_command_parses_back_to_the_signature(signature):
    assert_round_trip(signature)


@pytest.mark.parametrize("command, error, message", [
    ("softmax -n 0", CommandError, r"^flag -n/--batchsize 0 must be at least 1$"),
    ("softmax -W -1", CommandError, r"^flag -W/--in_w -1 must be at least 1$"),
    ("softmax -a 3", CommandError, r"^flag -a/--algorithm 3 must be 0 \(fast\), 1 \(accurate\) or 2 \(log\)$"),
    ("softmax -m 2", CommandError, r"^flag -m/--mode 2 must be 0 \(instance\) or 1 \(channel\)$"),
    ("softmax -B inf", CommandError, r"^flag -B/--beta inf must be finite$"),
    ("softmax -F -1", CommandError, r"^flag -F/--forw -1 must not be negative$"),
    ("softmax -a x", CommandError, r"^bad value 'x' for flag -a/--algorithm: expected an integer$"),
    ("softmax -L NCDHW", CommandError, r"^bad value 'NCDHW' for flag -L/--layout: expected one of NCHW, NHWC$"),
    ("softmax -k 3", CommandError, r"^unknown flag -k$"),
    ("softmax -L NHWC", UnsupportedError, r"^flag -L/--layout NHWC is not supported: BOO's softmax reads NCHW"),
    ("softmaxfp64 -n 2", UnsupportedError, r"^base argument 'softmaxfp64': softmax does not support f64 "
                                           r"\(supported: f32, f16, bf16\)$"),
])
def test_bad_commands_name_the_flag_at_fault(command, error, message):
    with pytest.raises(error, match=message):
        parse(command)


@pytest.mark.parametrize("fields, message", [
    (dict(n=0, c=1), r"^n must be a positive integer, got 0$"),
    (dict(n=1, c=2.0), r"^c must be a positive integer, got 2.0$"),
    (dict(n=1, c=1, alpha=float("nan")), r"^alpha must be finite, got nan$"),
    (dict(n=1, c=1, algorithm="exact"), r"^algorithm 'exact' must be one of fast, accurate, log$"),
    (dict(n=1, c=1, softmax_mode="spatial"), r"^softmax_mode 'spatial' must be one of instance, channel$"),
    (dict(n=1, c=1, mode="wrw"), r"^mode 'wrw' must be one of fwd, bwd$"),
])
def test_invalid_signatures_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        S(**fields)


def test_other_dtypes_are_unsupported():
    with pytest.raises(UnsupportedError, match=r"^softmax dtype torch.float64 is not supported; use float32, "
                                               r"float16 or bfloat16$"):
        S(1, 1, dtype=torch.float64)
