"""MIOpenDriver layernorm commands -> LayerNormSignature, in MIOpen's three dialects."""

from __future__ import annotations

import shlex

import pytest
import torch

from boo_core import BooOpRegistry, CommandError, UnsupportedError
from boo_core.testing import assert_round_trip
from boo_ops_layernorm import LayerNormSignature

from ..conftest import DATA

f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
CORPUS = [line.strip() for line in (DATA / "miopen_commands.txt").read_text().splitlines()
          if line.strip() and not line.startswith("#")]


def base_argument(line: str) -> str:
    tokens = shlex.split(line)
    return tokens[1] if tokens[0].endswith("MIOpenDriver") else tokens[0]


LAYERNORM_LINES = [line for line in CORPUS if base_argument(line).startswith("layernorm")]


def parse(command: str) -> list[LayerNormSignature]:
    return BooOpRegistry.parse_signatures(command)


def fwd(shape, o, affine=False, **kw) -> LayerNormSignature:
    return LayerNormSignature(shape, o, weight=affine, bias=affine, **kw)


def bwd(shape, o, affine=False, gradients=None, **kw) -> LayerNormSignature:
    return LayerNormSignature(shape, o, weight=affine, bias=affine, mode="bwd", gradients=gradients, **kw)


# One problem written in each dialect (old, new, log) -> the signatures all of them mean.
SAME_PROBLEM = [
    pytest.param(["layernorm -X 2x3x4x5 -o 1 -m 1 -F 1", "layernorm -N 2 -C 3 -H 4 -W 5 -o 1 -m 1 -F 1",
                  "layernormfp32 -n 2 -c 3 -H 4 -W 5 -F 1 -m 1 -o 1"], [fwd((2, 3, 4, 5), 1, True)], id="4d-fwd"),
    pytest.param(["layernormfp16 --input 2x3x6x4x5 --normalized_dim 2 --mode 0",
                  "layernormfp16 --in_n 2 --in_c 3 --in_d 6 --in_h 4 --in_w 5 -o 2 -m 0 -F 1",
                  "layernormfp16 -n 2 -c 3 -D 6 -H 4 -W 5 -F 1 -m 0 -o 2"],
                 [fwd((2, 3, 6, 4, 5), 2, dtype=f16)], id="5d-fwd-fp16"),
    pytest.param(["layernormbfp16 -X 64x768 -o 1 -m 1 -F 14", "layernormbfp16 -N 64 -C 0 -H 0 -W 768 -o 1 -m 1 -F 2",
                  "layernormbfp16 -n 64 -c 768 -F 2 -m 1 -o 1"], [bwd((64, 768), 1, True, dtype=bf16)],
                 id="2d-bwd-bf16"),
    pytest.param(["layernorm -X 100x3x32x32 -F 0", "layernorm", "layernormfp32 -n 100 -c 3 -H 32 -W 32 -F 0 -m 0"],
                 [fwd((100, 3, 32, 32), 3), bwd((100, 3, 32, 32), 3)], id="defaults-both-directions"),
    # The new dialect has no 3-D inputs.
    pytest.param(["layernorm -X 8x16x10 -o 2 -m 1 -e 0.001 -F 15",
                  "layernormfp32 -n 8 -c 16 -W 10 -F 0 -m 1 -o 2 -e 0.001"],
                 [fwd((8, 16, 10), 2, True, eps=1e-3), bwd((8, 16, 10), 2, True, eps=1e-3)], id="3d-old-and-log"),
]


@pytest.mark.parametrize("commands, expected", SAME_PROBLEM)
def test_each_dialect_parses_to_the_same_signatures(commands, expected):
    for command in commands:
        assert parse(command) == expected, command


def test_corpus_lines():
    assert LAYERNORM_LINES == [
        "layernorm --input 10x32x42x32 -t 1 --mode 0 --iter 100",
        "layernorm --input 10x32x42x32 -t 1 --mode 1 --iter 100",
        "layernorm --input 10x32x42x32 -t 1 -F 2 --iter 100",
        "layernorm --input 10x32x42x32 -t 1 -F 4 --iter 100",
        "layernorm --input 10x32x42x32 -t 1 -F 8 --iter 100",
        "/opt/rocm/bin/MIOpenDriver layernormfp16 --input 1x16x1536x576 -i 100 -t 1 -m 1 -w 1",
    ]
    shape = (10, 32, 42, 32)
    parsed = BooOpRegistry.parse(LAYERNORM_LINES[0])
    assert parsed.signatures == (fwd(shape, 3),)
    assert parsed.run_options["time"] == 1 and parsed.run_options["iter"] == 100
    assert parse(LAYERNORM_LINES[1]) == [fwd(shape, 3, True)]
    assert parse(LAYERNORM_LINES[2]) == [bwd(shape, 3, gradients=("dx",))]
    # iree-turbine's -F 4 / -F 8 ask for dw / db, which mode 0 (no affine parameters) lacks.
    for line, grad in ((LAYERNORM_LINES[3], "dw"), (LAYERNORM_LINES[4], "db")):
        with pytest.raises(CommandError, match=rf"flag -F/--forw \d asks for {grad}, but the command has no"):
            parse(line)
    assert parse(LAYERNORM_LINES[5]) == [fwd((1, 16, 1536, 576), 3, True, dtype=f16)]


@pytest.mark.parametrize("command, expected", [
    # Old dialect: iree-turbine's bitmask (1 forward, 2 dx, 4 dw, 8 db; 0 everything); default 1.
    ("layernorm -X 4x8 -o 1 -m 1", [fwd((4, 8), 1, True)]),
    ("layernorm -X 4x8 -o 1 -m 1 -F 0", [fwd((4, 8), 1, True), bwd((4, 8), 1, True)]),
    ("layernorm -X 4x8 -o 1 -m 1 -F 7", [fwd((4, 8), 1, True), bwd((4, 8), 1, True, ("dx", "dw"))]),
    ("layernorm -X 4x8 -o 1 -m 1 -F 12", [bwd((4, 8), 1, True, ("dw", "db"))]),
    ("layernorm -X 4x8 -o 1 -m 0 -F 2", [bwd((4, 8), 1, False, ("dx",))]),
    # New and log dialects: MIOpen's rule (0 both, 1 forward, otherwise backward of everything).
    ("layernorm -N 4 -C 0 -H 0 -W 8 -o 1 -m 1", [fwd((4, 8), 1, True), bwd((4, 8), 1, True)]),
    ("layernorm -N 4 -C 0 -H 0 -W 8 -o 1 -m 1 -F 3", [fwd((4, 8), 1, True), bwd((4, 8), 1, True)]),
    ("layernorm -N 4 -C 0 -H 0 -W 8 -o 1 -m 1 -F 4", [bwd((4, 8), 1, True)]),
    ("layernormfp32 -n 4 -c 8 -F 2 -m 0 -o 1", [bwd((4, 8), 1, False)]),
])
def test_forw_follows_each_dialect(command, expected):
    assert parse(command) == expected


def test_bias_extension_selects_weight_only_or_bias_only():
    weight_only = parse("layernorm -X 4x8 -o 1 -m 1 --bias 0")[0]
    assert (weight_only.weight, weight_only.bias) == (True, False)
    assert [s.name for s in weight_only.input_specs()] == ["x", "weight"]
    bias_only = parse("layernorm -X 4x8 -o 1 -m 0 --bias 1 -F 10")[0]
    assert (bias_only.weight, bias_only.bias, bias_only.gradients) == (False, True, ("dx", "db"))
    assert [s.name for s in bias_only.input_specs()] == ["dy", "x", "mean", "rstd"]


@pytest.mark.parametrize("signature", [
    fwd((4, 8), 1), fwd((7,), 0), fwd((2, 3, 4, 5, 6), 2, True, dtype=bf16),
    LayerNormSignature((3, 5), 1, weight=True, dtype=f16, eps=3.3e-7),
    LayerNormSignature((3, 5, 2), 0, bias=True, eps=0.0),
    bwd((4, 8), 1, True), bwd((4, 8), 1, True, ("dw",)), bwd((2, 9, 4), 2, True, ("db", "dx"), dtype=bf16),
    LayerNormSignature((6, 4), 1, weight=True, mode="bwd", gradients=("dw",)),
    LayerNormSignature((6, 4), 1, bias=True, mode="bwd", eps=0.25),
])
def test_to_command_round_trips(signature):
    assert_round_trip(signature)


def test_base_arguments_and_dtypes():
    assert parse("layernorm -X 2x3 -o 1")[0].dtype == f32
    assert parse("layernormfp32 -X 2x3 -o 1")[0].dtype == f32
    assert parse("layernormfp16 -X 2x3 -o 1")[0].dtype == f16
    assert parse("layernormbfp16 -X 2x3 -o 1")[0].dtype == bf16
    assert parse("MIOpen(HIP): Command [LogCmdLayerNorm] ./bin/MIOpenDriver layernormbfp16 -n 2 -c 3 -F 1 -m 1 -o 1") \
        == [fwd((2, 3), 1, True, dtype=bf16)]


def test_run_flags_are_kept_apart_from_the_kernel():
    parsed = BooOpRegistry.parse("layernorm -X 4x8 -o 1 -i 7 -V 0 -t 1 -w 1 -u 1")
    assert parsed.run_options == {"iter": 7, "verify": 0, "time": 1, "wall": 1, "mt": 1}
    assert parsed.signatures == (fwd((4, 8), 1),)


def test_tensor_descriptor_ignores_layout_or_strides_like_miopen():
    assert parse("layernorm -X 2x3x4,NCHW -o 1") == parse("layernorm -X 2x3x4 -o 1") == [fwd((2, 3, 4), 1)]


def test_the_op_is_registered_by_its_distribution():
    entry = BooOpRegistry.get_op("layernorm")
    assert entry.spec.keywords == ("layernorm",) and entry.spec.signature_class is LayerNormSignature
    assert entry.distribution == "boo-ops-layernorm 0.1.0"


@pytest.mark.parametrize("command, pattern, flag", [
    ("layernorm -X 4x8 -o 1 -Q 1", r"unknown flag -Q", "-Q"),
    ("layernorm -X 4x8 -o 1 --normalized 1", r"unknown flag --normalized", "--normalized"),
    ("layernorm -X 4x8.5 -o 1", r"bad value '4x8.5' for flag -X/--input: expected lengths such as 100x3x32x32",
     "-X/--input"),
    ("layernorm -X 4x0 -o 1", r"flag -X/--input 4x0: every length must be at least 1", "-X/--input"),
    ("layernorm -X 4x8 -o 2", r"flag -o/--normalized_dim 2 is out of range for the 2-D input 4x8 \(0 <= o < 2\)",
     "-o/--normalized_dim"),
    ("layernorm -X 4x8 -o -1", r"flag -o/--normalized_dim -1 is out of range", "-o/--normalized_dim"),
    ("layernorm -X 4x8 -o 1 -m 9", r"flag -m/--mode 9 must be 0 \(no affine\) or 1 \(weight and bias\)", "-m/--mode"),
    ("layernorm -X 4x8 -o 1 -e -1", r"flag -e/--eps -1.0 must be finite and not negative", "-e/--eps"),
    ("layernorm -X 4x8 -o 1 -e nan", r"flag -e/--eps nan must be finite", "-e/--eps"),
    ("layernorm -X 4x8 -o 1 -F 16", r"flag -F/--forw 16: the old dialect's bitmask is 1 forward, 2 dx, 4 dw, 8 db",
     "-F/--forw"),
    ("layernorm -X 4x8 -o 1 -F -2", r"flag -F/--forw -2 must not be negative", "-F/--forw"),
    ("layernorm -X 4x8 -o 1 -m 1 --bias 0 -F 8", r"flag -F/--forw 8 asks for db, but the command has no bias",
     "-F/--forw"),
    ("layernorm -X 4x8 -o 1 --bias 2", r"flag --bias 2 must be 0 or 1", "--bias"),
    ("layernorm -X 4x8 -o 1 -H 8", r"flag -H/--in_h cannot be combined with -X/--input", "-H/--in_h"),
    ("layernorm -X 4x8 -o 1 -n 4", r"flag -n/--batchsize cannot be combined with -X/--input", "-n/--batchsize"),
    ("layernorm -N 4 -c 8 -o 1", r"flag -N/--in_n \(new dialect\) cannot be combined with -c/--in_channels "
                                 r"\(MIOpen's log dialect\)", "-N/--in_n"),
    ("layernorm -N 4 -C 0 -H 5 -W 8", r"flag -C/--in_c 0: invalid tensor sizes -N 4 -C 0 -H 5 -W 8", "-C/--in_c"),
    ("layernorm -N 0 -C 3 -H 5 -W 8", r"flag -N/--in_n 0 must be at least 1 for a 4-D input", "-N/--in_n"),
    ("layernorm -N 2 -C 3 -H -5 -W 8", r"flag -H/--in_h -5 must not be negative", "-H/--in_h"),
    ("layernorm -N 2 -C 3 -H 4 -W 8 -L NCDHW", r"flag -L/--layout NCDHW does not fit the 4-D input 2x3x4x8",
     "-L/--layout"),
    ("layernorm -N 2 -C 3 -H 4 -W 8 -L NWHC", r"bad value 'NWHC' for flag -L/--layout", "-L/--layout"),
    ("layernormfp16 -n 4 -F 1 -m 1", r"flag -c/--in_channels is missing: MIOpen's log line gives -n and -c",
     "-c/--in_channels"),
    ("layernormfp16 -n 4 -c 8 -H 3 -F 1 -m 1", r"flag -W/--in_w is missing: after -n -c, MIOpen's log gives -W",
     "-W/--in_w"),
    ("layernormfp16 -n 4 -c 8 -D 2 -W 3 -F 1", r"flag -H/--in_h is missing", "-H/--in_h"),
    # MIOpen's log never says -o; with fewer than 4 dims its default 3 does not fit.
    ("layernormfp16 -n 4 -c 8 -W 3 -F 1 -m 1", r"flag -o/--normalized_dim 3 is out of range for the 3-D input",
     "-o/--normalized_dim"),
])
def test_malformed_commands_name_the_flag(command, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        parse(command)
    assert info.value.flag == flag


@pytest.mark.parametrize("command, pattern, flag", [
    ("layernorm -X 4x8 -o 1 -m 2", r"flag -m/--mode 2 \(ELEMENTWISE_AFFINE_FUSED_ADD\) belongs to MIOpen's "
                                   r"addlayernorm/t5layernorm", "-m/--mode"),
    ("layernorm -X 4x8 -o 1 -m 5", r"flag -m/--mode 5 \(WEIGHT_BIAS_T5\)", "-m/--mode"),
    ("layernorm -N 2 -C 3 -H 4 -W 8 -L NHWC", r"flag -L/--layout NHWC is not supported yet", "-L/--layout"),
    ("layernormint8 -X 4x8 -o 1", r"base argument 'layernormint8': layernorm does not support i8", None),
])
def test_unsupported_requests_are_refused_by_name(command, pattern, flag):
    with pytest.raises(UnsupportedError, match=pattern) as info:
        parse(command)
    assert info.value.flag == flag


def test_the_log_dialect_needs_o_below_four_dims():
    assert parse("layernormfp16 -n 4 -c 8 -W 3 -F 1 -m 1 -o 2") == [fwd((4, 8, 3), 2, True, dtype=f16)]
    assert parse("layernormfp16 -n 4 -c 8 -F 2 -m 0 -o 1") == [bwd((4, 8), 1, dtype=f16)]


@pytest.mark.parametrize("command, pattern, flag", [
    ("layernorm -X ١٢x3", r"^bad value '١٢x3' for flag -X/--input: expected lengths such as 100x3x32x32$",
     "-X/--input"),
    ("layernorm -X 2x3x" + "x".join(["1"] * 9), r"^flag -X/--input 2x3x1x1x1x1x1x1x1x1x1 has 11 lengths: at most 8 "
     r"are supported$", "-X/--input"),
    ("layernorm -X 2x2147483648", r"^flag -X/--input 2x2147483648 has a length above 2147483647$", "-X/--input"),
    ("layernorm -X 2x" + "9" * 400, r"^flag -X/--input 2x9{38}\.\.\. has a length above 2147483647$", "-X/--input"),
    ("layernorm -X 2x3x4 -o 3", r"^flag -o/--normalized_dim 3 is out of range", "-o/--normalized_dim"),
    ("layernorm -N 2147483648 -C 3 -H 4 -W 4", r"^flag -N/--in_n 2147483648 must be at most 2147483647$", "-N/--in_n"),
    ("layernorm -N 3 -C 3 -H 4 -W ٤", r"^bad value '٤' for flag -W/--in_w: expected an integer$", "-W/--in_w"),
    ("layernormfp16 -n 0 -c 8 -W 3 -o 1", r"^flag -n/--batchsize 0 must be at least 1$", "-n/--batchsize"),
    ("layernorm -X 65536x65536x65536x2", r"tensor x of shape \(65536, 65536, 65536, 2\) would take 2\.25e\+15 bytes; "
     r"BOO accepts tensors of up to 2\*\*48 bytes", None),
    ("layernorm -N 2 -C 3 -H 0 -W 4", r"^flag -H/--in_h 0: invalid tensor sizes", "-H/--in_h"),
    ("layernorm -N 2 -C 3 -H 4 -W 0", r"^flag -W/--in_w 0 must be at least 1 for a 4-D input$", "-W/--in_w"),
    ("layernorm -X 2x3 -o 1 -e 1e39", r"^flag -e/--eps 1e\+39 is out of f32's range \(magnitude at most "
     r"3\.40282e\+38\), the dtype the variance is computed in$", "-e/--eps"),
    ("layernormfp16 -X 2x3 -o 1 -e 3.5e38", r"^flag -e/--eps 3\.5e\+38 is out of f32's range", "-e/--eps"),
])
def test_hostile_commands_are_refused_by_name(command, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        parse(command)
    assert info.value.flag == flag
