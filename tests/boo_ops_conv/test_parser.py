"""MIOpenDriver conv commands -> ConvSignature, checked on the real command corpus."""

from __future__ import annotations

import shlex

import pytest
import torch

from boo_core import BooOpRegistry, CommandError, UnsupportedError
from boo_core.testing import assert_round_trip
from boo_ops_conv import ConvSignature

from ..conftest import DATA

CORPUS = [line.strip() for line in (DATA / "miopen_commands.txt").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
CONV_LINES = [line for line in CORPUS if shlex.split(line)[0 if "MIOpenDriver" not in line.split()[0] else 1]
              .startswith("conv")]
ROCMLIR_LINES = [line for line in CONV_LINES if "-perf_priority" in line]

# An independent reading of MIOpenDriver's kernel-shaping conv flags: short -> (long, default).
KERNEL_FLAGS = {
    "n": ("batchsize", 100), "c": ("in_channels", 3), "!": ("in_d", 32), "H": ("in_h", 32), "W": ("in_w", 32),
    "k": ("out_channels", 32), "@": ("fil_d", 3), "y": ("fil_h", 3), "x": ("fil_w", 3), "$": ("pad_d", 0),
    "p": ("pad_h", 0), "q": ("pad_w", 0), "#": ("conv_stride_d", 1), "u": ("conv_stride_h", 1),
    "v": ("conv_stride_w", 1), "^": ("dilation_d", 1), "l": ("dilation_h", 1), "j": ("dilation_w", 1),
    "g": ("group_count", 1), "F": ("forw", 0), "_": ("spatial_dim", 2), "m": ("mode", "conv"),
    "I": ("in_layout", ""), "O": ("out_layout", ""), "f": ("fil_layout", ""), "b": ("bias", 0),
    "%": ("trans_output_pad_d", 0), "Y": ("trans_output_pad_h", 0), "X": ("trans_output_pad_w", 0),
}
LONG = {long: short for short, (long, _) in KERNEL_FLAGS.items()}
DTYPES = {"conv": torch.float32, "convfp32": torch.float32, "convfp16": torch.float16, "convbfp16": torch.bfloat16}


def independent_reading(line: str) -> tuple[torch.dtype, dict[str, object]]:
    tokens = shlex.split(line)
    if tokens[0].endswith("MIOpenDriver"):
        tokens = tokens[1:]
    values = {short: default for short, (_, default) in KERNEL_FLAGS.items()}
    for flag, value in zip(tokens[1::2], tokens[2::2]):
        short = LONG.get(flag[2:]) if flag.startswith("--") else flag[1:]
        if short in KERNEL_FLAGS:
            default = KERNEL_FLAGS[short][1]
            values[short] = value if isinstance(default, str) else int(value)
    return DTYPES[tokens[0]], values


def expected_signatures(line: str) -> list[dict[str, object]]:
    """What each signature of a corpus line must hold, by MIOpen's rules, written out plainly."""
    dtype, v = independent_reading(line)
    rank = 3 if v["_"] == 3 or len(v["I"]) == 5 else 2
    axes = ("!", "H", "W") if rank == 3 else ("H", "W")
    window = {"!": "@", "H": "y", "W": "x"}
    pad = {"!": "$", "H": "p", "W": "q"}
    stride = {"!": "#", "H": "u", "W": "v"}
    dilation = {"!": "^", "H": "l", "W": "j"}
    out_pad = {"!": "%", "H": "Y", "W": "X"}
    trans = v["m"] == "trans"
    default_layout = "NCDHW" if rank == 3 else "NCHW"
    modes = [m for m, bit in (("fwd", 1), ("bwd", 2), ("wrw", 4)) if (v["F"] or 7) & bit]
    if v["b"] and ("bwd" in modes or "wrw" in modes):
        modes.append("bwd_bias")
    c, k, g = v["c"], v["k"], v["g"]
    return [dict(
        mode=mode, dtype=dtype, transposed=trans,
        input_shape=(v["n"], c, *(v[a] for a in axes)),
        kernel_shape=((c, k // g) if trans else (k, c // g)) + tuple(v[window[a]] for a in axes),
        stride=tuple(v[stride[a]] for a in axes), padding=tuple(v[pad[a]] for a in axes),
        dilation=tuple(v[dilation[a]] for a in axes), groups=g,
        output_padding=tuple(v[out_pad[a]] for a in axes) if trans else (0,) * rank,
        input_layout=v["I"] or default_layout, kernel_layout=v["f"] or default_layout,
        output_layout=v["O"] or default_layout, bias=bool(v["b"]) and mode == "fwd",
    ) for mode in modes]


PARSEABLE = [line for line in CONV_LINES if line not in ROCMLIR_LINES]


def test_corpus_line_counts():
    assert len(PARSEABLE) == 48
    assert len(ROCMLIR_LINES) == 5


@pytest.mark.parametrize("line", PARSEABLE)
def test_every_corpus_conv_line_parses_to_the_right_signatures(line):
    signatures = BooOpRegistry.parse_signatures(line)
    expected = expected_signatures(line)
    assert [s.mode for s in signatures] == [e["mode"] for e in expected]
    for signature, fields in zip(signatures, expected):
        assert isinstance(signature, ConvSignature)
        for name, value in fields.items():
            assert getattr(signature, name) == value, name
        assert_round_trip(signature)


def test_spot_checks():
    nhwc = BooOpRegistry.parse_command(PARSEABLE[0])
    assert nhwc == ConvSignature((128, 384, 24, 48), (384, 384, 1, 1), dtype=torch.bfloat16, shared_layout="NHWC")
    assert [s.shape for s in nhwc.input_specs()] == [(128, 24, 48, 384), (384, 1, 1, 384)]
    assert nhwc.output_specs()[0].shape == (128, 24, 48, 384)
    # Mixed layouts as MIOpen's perf lists have them: only the output is NHWC.
    mixed = BooOpRegistry.parse_command(
        "./bin/MIOpenDriver convfp16 --batchsize 256 --spatial_dim 2 --pad_h 0 --pad_w 0 --pad_d 0 "
        "--conv_stride_h 1 --conv_stride_w 1 --conv_stride_d 0 --dilation_h 1 --dilation_w 1 --dilation_d 0 "
        "--group_count 1 --mode conv --pad_mode default --trans_output_pad_h 0 --trans_output_pad_w 0 "
        "--trans_output_pad_d 0 --out_layout NHWC --in_d 1 --in_h 56 --in_w 56 --fil_d 1 --fil_h 1 --fil_w 1 "
        "--in_channels 256 --out_channels 128 --forw 1")
    assert (mixed.input_layout, mixed.kernel_layout, mixed.output_layout) == ("NCHW", "NCHW", "NHWC")
    assert mixed.output_specs()[0].shape == (256, 56, 56, 128)
    grouped = BooOpRegistry.parse_command(
        "conv -n 2 -c 176 -H 28 -W 28 -k 176 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -g 176 -F 1")
    assert grouped.kernel_shape == (176, 1, 3, 3) and grouped.output_shape == (2, 176, 14, 14)
    asymmetric = BooOpRegistry.parse_command("conv -n 1 -c 4 -H 17 -W 17 -k 4 -y 1 -x 7 -p 0 -q 3 -F 1")
    assert asymmetric.padding == (0, 3) and asymmetric.output_shape == (1, 4, 17, 17)


@pytest.mark.parametrize("line, pattern, flag", [
    ("convint8 -n 1 -F 1", r"base argument 'convint8': conv does not support i8", None),
    ("conv -n 1 -F 1 --in_cast_type fp8", r"flag -U/--in_cast_type fp8 is not supported: cast types",
     "-U/--in_cast_type"),
    ("conv -n 1 -F 1 -d input.bin", r"flag -d/--in_data input.bin is not supported: BOO generates its own inputs",
     "-d/--in_data"),
    ("conv -n 1 -F 3 --activation relu", r"--activation fuses into the forward convolution only; use -F 1",
     "--activation"),
])
def test_unsupported_requests_are_refused_by_name(line, pattern, flag):
    with pytest.raises(UnsupportedError, match=pattern) as info:
        BooOpRegistry.parse_signatures(line)
    assert info.value.flag == flag


@pytest.mark.parametrize("line, pattern, flag", [
    ("conv -n 1 -F 1 --batch 2", r"unknown flag --batch", "--batch"),
    ("conv -n 1 -F 1 -Q 2", r"unknown flag -Q", "-Q"),
    ("convbfp16 -n 1 -F 1 -in_layout=NHWC", r"unknown flag -in_layout=NHWC \(short flags are one letter; "
                                            r"did you mean --in_layout\?\)", "-in_layout=NHWC"),
    ("conv -n 1 -F 1 -c", r"flag -c/--in_channels needs a value", "-c/--in_channels"),
    ("conv -n 1 -F 1 -k 3.5", r"bad value '3.5' for flag -k/--out_channels: expected an integer",
     "-k/--out_channels"),
    ("conv -n 1 -F 1 --in_layout NWHC", r"bad value 'NWHC' for flag -I/--in_layout", "-I/--in_layout"),
    ("conv -n 1 -F 1 -m deconv", r"bad value 'deconv' for flag -m/--mode: expected one of conv, trans", "-m/--mode"),
    ("conv -n 1 -c 6 -k 4 -g 4 -F 1", r"flag -g/--group_count 4 must divide in_channels 6 and out_channels 4",
     "-g/--group_count"),
    ("conv -n 1 -H 2 -y 5 -F 1", r"flag -H/--in_h 2 with filter 5, padding 0, stride 1 and dilation 1 leaves "
     r"no output", "-H/--in_h"),
    ("conv -n 0 -F 1", r"flag -n/--batchsize 0 must be at least 1", "-n/--batchsize"),
    ("conv -n 1 -p -1 -F 1", r"flag -p/--pad_h -1 must not be negative", "-p/--pad_h"),
    ("conv -n 1 -u 0 -F 1", r"flag -u/--conv_stride_h 0 must be at least 1", "-u/--conv_stride_h"),
    ("conv -n 1 -F 1 -b 2", r"flag -b/--bias must be 0 or 1", "-b/--bias"),
    ("conv -n 1 -F 1 --spatial_dim 4", r"flag -_/--spatial_dim 4: expected 2 or 3 \(or 1\)", "-_/--spatial_dim"),
    ("conv -n 1 -F 16", r"flag -F/--forw 16: expected a bitmask of 1, 2, 4 and 8", "-F/--forw"),
    ("conv -n 1 -F 1 --in_layout NHWC --out_layout NDHWC", r"layouts of different ranks: -I/--in_layout NHWC, "
     r"-O/--out_layout NDHWC", "-I/--in_layout"),
    ("conv -n 1 -F 1 --spatial_dim 2 --in_layout NDHWC", r"flag -I/--in_layout NDHWC is 3-D but "
     r"-_/--spatial_dim is 2", "-I/--in_layout"),
    ("conv -n 1 -F 1 -m trans -u 2 -Y 2", r"flag -Y/--trans_output_pad_h 2 must be smaller than the stride 2 "
     r"or the dilation 1", "-Y/--trans_output_pad_h"),
    ("conv -n 1 -F 1 --spatial_dim 3 --in_d 2 --fil_d 3", r"flag -!/--in_d 2 with filter 3, padding 0, stride 1 "
     r"and dilation 1 leaves no output", "-!/--in_d"),
    ("conv -n 1 -F 1 --activation swish", r"bad value 'swish' for flag --activation", "--activation"),
    ("conv -n 1 -c 1 -k 1 -H 2147483647 -W 1 -y 1 -x 1 -p 2147483647 -F 1", r"^flag -H/--in_h 2147483647 with "
     r"filter 1, padding 2147483647, stride 1 and dilation 1 gives an output height of 6442450941, above 2\*\*31-1$",
     "-H/--in_h"),
    ("conv -n 1 -c 1 -k 1 -H 1 -W 2147483647 -y 1 -x 1 -m trans -v 2 -F 1", r"^flag -W/--in_w 2147483647 with "
     r"filter 1, padding 0, stride 2 and dilation 1 gives an output width of 4294967293, above 2\*\*31-1$",
     "-W/--in_w"),
])
def test_malformed_commands_name_the_flag(line, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        BooOpRegistry.parse_command(line)
    assert info.value.flag == flag


def test_a_signature_whose_output_dimension_exceeds_int32_is_refused():
    with pytest.raises(ValueError, match=r"^output spatial dimension 0 is 4294967295 \(input \(2147483647, 1\), "
                                         r"window \(1, 1\), padding \(1073741824, 0\), stride \(1, 1\)\): "
                                         r"above 2\*\*31-1$"):
        ConvSignature(input_shape=(1, 1, 2**31 - 1, 1), kernel_shape=(1, 1, 1, 1), padding=(2**30, 0))
    largest = ConvSignature(input_shape=(1, 1, 2**31 - 1, 1), kernel_shape=(1, 1, 1, 1))
    assert largest.output_spatial == (2**31 - 1, 1)


def test_run_flags_are_accepted_and_kept_apart_from_the_kernel():
    parsed = BooOpRegistry.parse("convbfp16 -n 2 -c 8 -H 8 -W 8 -k 4 -F 1 -t 1 -i 100 -V 0 -s 1 -S 0 -w 1 -P 0")
    assert parsed.run_options["iter"] == 100 and parsed.run_options["time"] == 1
    assert parsed.run_options["verify"] == 0 and parsed.run_options["solution"] == "0"
    assert parsed.signatures[0] == BooOpRegistry.parse_command("convbfp16 -n 2 -c 8 -H 8 -W 8 -k 4 -F 1")


def test_depth_flags_are_ignored_in_2d_like_miopen():
    plain = BooOpRegistry.parse_command("conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1")
    assert BooOpRegistry.parse_command("conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1 --in_d 1 --conv_stride_d 0 "
                                       "--dilation_d 0 --fil_d 7") == plain


@pytest.mark.parametrize("extra, padding", [
    ("--pad_mode same", (1, 1)),
    ("--pad_mode valid -p 2 -q 2", (0, 0)),
    ("--pad_mode default -p 2 -q 1", (2, 1)),
    ("--pad_mode same -u 2 -v 2 -H 9 -W 10", (1, 0)),  # 9 % 2 = 1: (3 - 1) // 2; 10 % 2 = 0: (3 - 2) // 2
    ("--pad_mode same -l 2 -j 2 -p 0 -q 0", (0, 0)),  # dilation > 1 with a 3x3 filter: MIOpen ignores the mode
])
def test_pad_mode_follows_miopen(extra, padding):
    line = f"conv -n 1 -c 3 -H 8 -W 8 -k 2 -y 3 -x 3 -F 1 {extra}"
    assert BooOpRegistry.parse_command(line).padding == padding


def test_lowercase_layouts_are_accepted():
    assert BooOpRegistry.parse_command("conv -n 1 -F 1 --in_layout nhwc -I nhwc").input_layout == "NHWC"
    assert BooOpRegistry.parse_command("conv -n 1 -F 1 -I CHWN").input_specs()[0].shape == (3, 32, 32, 1)


@pytest.mark.parametrize("forw, bias, modes", [
    (0, 0, ["fwd", "bwd", "wrw"]),
    (1, 1, ["fwd"]),
    (2, 0, ["bwd"]),
    (4, 0, ["wrw"]),
    (3, 0, ["fwd", "bwd"]),
    (5, 0, ["fwd", "wrw"]),
    (6, 0, ["bwd", "wrw"]),
    (7, 0, ["fwd", "bwd", "wrw"]),
    (0, 1, ["fwd", "bwd", "wrw", "bwd_bias"]),
    (2, 1, ["bwd", "bwd_bias"]),
    (8, 0, ["bwd_bias"]),
])
def test_forw_is_a_bitmask_and_bias_adds_its_gradient(forw, bias, modes):
    signatures = BooOpRegistry.parse_signatures(f"conv -n 2 -c 4 -H 8 -W 8 -k 6 -F {forw} -b {bias}")
    assert [s.mode for s in signatures] == modes
    assert [s.bias for s in signatures] == [bool(bias) and m == "fwd" for m in modes]


def test_transposed_convolution_uses_miopens_filter_shape():
    signature = BooOpRegistry.parse_command("conv -n 2 -c 8 -H 5 -W 5 -k 6 -y 3 -x 3 -u 2 -v 2 -p 1 -q 1 -g 2 "
                                            "-m trans --trans_output_pad_h 1 -F 1 --fil_layout NHWC")
    assert signature.kernel_shape == (8, 3, 3, 3)  # [c, k/g, y, x]
    assert signature.input_specs()[1].shape == (8, 3, 3, 3)  # NHWC filter: c, y, x, k/g
    assert signature.output_shape == (2, 6, 10, 9)  # 2*(5-1) + 3 - 2 + output padding
    assert_round_trip(signature)


def test_output_padding_is_ignored_for_ordinary_convolution_like_miopen():
    plain = BooOpRegistry.parse_command("conv -n 1 -c 4 -H 8 -W 8 -k 4 -u 2 -v 2 -F 1")
    assert BooOpRegistry.parse_command("conv -n 1 -c 4 -H 8 -W 8 -k 4 -u 2 -v 2 -F 1 -Y 1 -X 1") == plain


@pytest.mark.parametrize("line, rank, layouts", [
    ("conv -n 1 -c 4 -W 9 -k 2 -x 3 --spatial_dim 1 -F 1", 1, ("NCW",) * 3),
    ("conv -n 1 -c 4 -W 9 -k 2 -x 3 --in_layout NWC --fil_layout NWC --out_layout NWC -F 1", 1, ("NWC",) * 3),
    ("conv -n 1 -c 4 --in_d 5 -H 6 -W 7 -k 2 --fil_d 3 --spatial_dim 3 -F 1", 3, ("NCDHW",) * 3),
    ("conv -n 1 -c 4 --in_d 5 -H 6 -W 7 -k 2 --fil_d 3 --out_layout NDHWC -F 1", 3, ("NCDHW", "NCDHW", "NDHWC")),
    ("conv -n 1 -c 4 -H 6 -W 7 -k 2 --in_layout CHWN -F 1", 2, ("CHWN", "NCHW", "NCHW")),
])
def test_rank_comes_from_spatial_dim_or_layout_length(line, rank, layouts):
    signature = BooOpRegistry.parse_command(line)
    assert signature.spatial_rank == rank
    assert (signature.input_layout, signature.kernel_layout, signature.output_layout) == layouts
    assert_round_trip(signature)


def test_activation_extension():
    signature = BooOpRegistry.parse_command("convbfp16 -n 1 -c 4 -H 8 -W 8 -k 4 -F 1 -b 1 --activation silu")
    assert signature.activation == "silu" and signature.bias
    assert "--activation silu" in signature.to_command()
    assert_round_trip(signature)


@pytest.mark.parametrize("line, pattern, flag", [
    # A layout does not turn a 2-D command into a 3-D one, nor drop the flags of a rank.
    ("conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1 -O ncdhw", r"^flag -O/--out_layout NCDHW is 3-D, but the command is 2-D: it "
     r"gives no depth flag \(-!/--in_d, -@/--fil_d\.\.\.\) and no -_/--spatial_dim 3$", "-O/--out_layout"),
    ("conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1 --in_layout NCW", r"^flag -H/--in_h 8 does not apply to a 1-D convolution "
     r"\(-I/--in_layout NCW\): 1-D takes the width flags only$", "-H/--in_h"),
    ("conv -n 1 -c 3 -W 8 -k 2 -y 3 -F 1 --in_layout NWC", r"^flag -y/--fil_h 3 does not apply to a 1-D convolution",
     "-y/--fil_h"),
    ("conv -n 1 -c 3 -W 8 -k 2 -p 1 -F 1 --spatial_dim 1", r"^flag -p/--pad_h 1 does not apply to a 1-D "
     r"convolution \(-_/--spatial_dim 1\)", "-p/--pad_h"),
    ("conv -n 1 -c 3 -W 8 -k 2 --in_d 4 -F 1 --spatial_dim 1", r"^flag -!/--in_d 4 does not apply to a 1-D",
     "-!/--in_d"),
    # Every integer is bounded; the products of sizes too.
    ("conv -n 1 -F 1 -u 9223372036854775808", r"^flag -u/--conv_stride_h 9223372036854775808 must be at most "
     r"2147483647$", "-u/--conv_stride_h"),
    ("conv -n 2147483648 -F 1", r"^flag -n/--batchsize 2147483648 must be at most 2147483647$", "-n/--batchsize"),
    ("conv -F 1 -n " + "1" * 309, r"^flag -n/--batchsize 1{40}\.\.\. must be at most 2147483647$", "-n/--batchsize"),
    ("conv -F 1 -q -1", r"^flag -q/--pad_w -1 must not be negative$", "-q/--pad_w"),
    ("conv -F 1 -l 0", r"^flag -l/--dilation_h 0 must be at least 1$", "-l/--dilation_h"),
    ("conv -F 1 -g 0", r"^flag -g/--group_count 0 must be at least 1$", "-g/--group_count"),
    ("conv -F 1 -i 0", r"^flag -i/--iter 0 must be at least 1$", "-i/--iter"),
    ("conv -F 1 -n ١٢", r"^bad value '١٢' for flag -n/--batchsize: expected an integer$", "-n/--batchsize"),
    ("conv -F 1 -H ５", r"^bad value '５' for flag -H/--in_h: expected an integer$", "-H/--in_h"),
    ("conv -F 1 --spatial_dim 3 --conv_stride_d 0", r"^flag -#/--conv_stride_d 0 must be at least 1$",
     "-#/--conv_stride_d"),
    ("conv -F 1 --spatial_dim 3 --in_d -1", r"^flag -!/--in_d -1 must not be negative$", "-!/--in_d"),
    ("conv -F 1 -n 2147483647 -c 2147483647", r"^conv2d_fwd_f32_n2147483647c2147483647h32w32_\S+: tensor x of shape "
     r"\(2147483647, 2147483647, 32, 32\) would take 1\.89e\+22 bytes; BOO accepts tensors of up to 2\*\*48 bytes",
     None),
    ("conv -F 1 -m trans -H 4 -W 4 -u 2147483647 -v 2147483647 -n 1 -c 1 -k 1",
     r"^flag -H/--in_h 4 with filter 3, padding 0, stride 2147483647 and dilation 1 gives an output height of "
     r"6442450944, above 2\*\*31-1$", "-H/--in_h"),
    ('conv -n "3', r"^cannot split the command into arguments: No closing quotation$", None),
])
def test_hostile_commands_are_refused_by_name(line, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        BooOpRegistry.parse_command(line)
    assert info.value.flag == flag


def test_depth_flags_of_zero_are_accepted_in_2d_like_miopens_perf_lists():
    line = "conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1 --in_d 0 --fil_d 0 --conv_stride_d 0 --dilation_d 0 --spatial_dim 2"
    assert BooOpRegistry.parse_command(line) == BooOpRegistry.parse_command("conv -n 1 -c 3 -H 8 -W 8 -k 2 -F 1")


def test_a_3d_layout_with_a_depth_flag_still_makes_a_3d_convolution():
    signature = BooOpRegistry.parse_command("conv -n 1 -c 3 --fil_d 1 -H 8 -W 8 -k 2 -F 1 --in_layout NDHWC")
    assert signature.spatial_rank == 3 and signature.input_shape == (1, 3, 32, 8, 8)  # MIOpen's default depth
