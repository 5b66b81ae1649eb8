"""MIOpenDriver bnorm commands -> BatchNormSignature."""

from __future__ import annotations

import logging
import shlex

import pytest
import torch

from boo_core import BooOpRegistry, CommandError, UnsupportedError
from boo_core.testing import assert_round_trip
from boo_ops_batchnorm import BatchNormSignature as S

from ..conftest import DATA

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
CORPUS = [line.strip() for line in (DATA / "miopen_commands.txt").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
BNORM_LINES = [line for line in CORPUS if "bnorm" in shlex.split(line)[0] + " " + shlex.split(line)[1]]


def parse(command: str) -> list[S]:
    return BooOpRegistry.parse_signatures(command)


@pytest.mark.parametrize(("command", "expected"), [
    ("bnorm -F 1 -n 32 -c 512 -H 16 -W 16 -m 1 -s 1", S((32, 512, 16, 16), save=True)),
    ("bnormfp16 -n 256 -c 512 -H 18 -W 18 -m 1 --forw 0 -b 1 -r 1",
     S((256, 512, 18, 18), mode="bwd", dtype=f16)),  # -r means nothing to the backward
    # iree-turbine's sample: neither -F nor -b: the training forward
    ("bnormbfp16 --batchsize 8 --in_channels 64 --in_h 56 --in_w 56 -t 1 --iter 100 --save 1 --run 1 --layout NHWC",
     S((8, 64, 56, 56), spatial=False, channels_last=True, save=True, running=True, dtype=bf16)),  # -m 0
    ("bnorm -n 4 -c 8 -D 3 -H 5 -W 6 -L ndhwc -F 2 -r 1 -m 1", S((4, 8, 3, 5, 6), mode="infer", channels_last=True,
                                                               running=True)),
    ("bnorm -n 4 -c 8 -H 5 -W 6 -F 2", S((4, 8, 5, 6), mode="infer", spatial=False)),  # per-activation, batch stats
    ("bnormbfp16 -n 2 -c 3 -F 1 -m 1 --epsilon 0.001 --activation relu",
     S((2, 3, 32, 32), eps=1e-3, activation="relu", dtype=bf16)),
    ("bnormbfp16 -n 2 -c 3 -F 1 -m 1 -L NHWC --residual 1 --activation relu",
     S((2, 3, 32, 32), channels_last=True, residual=True, activation="relu", dtype=bf16)),
    # the backward kernels torch.compile fuses: the ReLU's gradient first, with a residual block's sum before it
    ("bnormbfp16 -n 2 -c 3 -F 0 -b 1 -m 1 -s 1 -L NHWC --activation relu",
     S((2, 3, 32, 32), mode="bwd", channels_last=True, save=True, activation="relu", dtype=bf16)),
    ("bnormbfp16 -n 2 -c 3 -F 0 -b 1 -m 1 -s 1 -L NHWC --residual 1 --activation relu",
     S((2, 3, 32, 32), mode="bwd", channels_last=True, save=True, residual=True, activation="relu", dtype=bf16)),
])
def test_commands_mean_their_signatures(command, expected):
    assert parse(command) == [expected]
    assert_round_trip(expected)


@pytest.mark.parametrize(("mixed", "plain", "dtype"), [("bnormfp16fp32", "bnormfp16", f16),
                                                        ("bnormbfp16fp32", "bnormbfp16", bf16)])
def test_miopens_mixed_precision_spellings_are_the_16_bit_ops(mixed, plain, dtype):
    """MIOpen's bnormfp16fp32 and bnormbfp16fp32 (16-bit data, float32 statistics) are what
    BOO's bnormfp16 and bnormbfp16 compute; the commands BOO prints use the plain spelling."""
    flags = "-n 4 -c 16 -H 8 -W 8 -m 1 -F 1 -s 1 -r 1"
    [signature] = parse(f"{mixed} {flags}")
    assert signature == parse(f"{plain} {flags}")[0]
    assert signature.dtype == dtype and signature.stats_dtype == f32
    assert signature.to_command().startswith(plain + " ")


@pytest.mark.parametrize("base", ["convfp16fp32", "bnormfp32fp16", "bnormfp16fp16"])
def test_the_mixed_suffixes_are_batch_norms_own(base):
    with pytest.raises(Exception, match=f"unknown op '{base}'"):
        parse(f"{base} -n 4")


def test_defaults_are_miopen_drivers():
    [signature] = parse("bnorm -F 1")
    assert signature == S((32, 3, 32, 32), spatial=False)  # -n 32 -c 3 -H 32 -W 32, per-activation, NCHW


def test_every_bnorm_line_of_the_corpus_parses():
    assert BNORM_LINES
    for line in BNORM_LINES:
        assert parse(line), line


def test_a_forward_with_the_backward_runs_the_forward_as_miopendriver_does(caplog):
    with caplog.at_level(logging.WARNING):
        [signature] = parse("bnorm -n 2 -c 3 -F 1 -b 1 -m 1")
    assert signature.mode == "train"
    assert "-F/--forw 1 with -b/--back 1" in caplog.text


@pytest.mark.parametrize(("command", "flag"), [
    ("bnorm -F 0 -b 0", "-F/--forw"),
    ("bnorm -F 3", "-F/--forw"),
    ("bnorm -b 2 -F 0", "-b/--back"),
    ("bnorm -F 1 -m 2", "-m/--mode"),
    ("bnorm -F 1 -s 2", "-s/--save"),
    ("bnorm -F 1 -r -1", "-r/--run"),
    ("bnorm -F 1 -L NCDHW", "-L/--layout"),  # 5-D layout without -D
    ("bnorm -F 1 -D 4 -L NHWC", "-L/--layout"),
    ("bnorm -F 1 -L NWHC", "-L/--layout"),
    ("bnorm -F 1 -n 0", "-n/--batchsize"),
    ("bnorm -F 1 -c -3", "-c/--in_channels"),
    ("bnorm -F 1 --epsilon -1", "--epsilon"),
    ("bnormfp16 -F 1 --epsilon 1e-9", "--epsilon"),  # fine: the variance is float32
    ("bnorm -F 0 -b 1 --activation gelu", "--activation"),
    ("bnorm -F 0 -b 1 --residual 2", "--residual"),
    ("bnorm -F 1 --residual 2", "--residual"),
    ("bnorm -F 1 -m 0 -r 1 -n 1", "-n/--batchsize"),  # a per-activation running variance of one sample
])
def test_bad_commands_name_the_flag(command, flag):
    if command.startswith("bnormfp16 -F 1 --epsilon 1e-9"):
        assert parse(command)[0].eps == 1e-9
        return
    with pytest.raises(CommandError) as raised:
        parse(command)
    assert flag in str(raised.value)


@pytest.mark.parametrize("flag", ["-A 2", "-B 0.5"])
def test_blending_with_a_prior_output_is_refused_by_name(flag):
    with pytest.raises(UnsupportedError, match=flag.split()[0]):
        parse(f"bnorm -F 1 {flag}")
