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

# An independent reading of MIOpenDriver's kernel-shaping conv flags (short, long, default).
KERNEL_FLAGS = {
    "n": ("batchsize", 100), "c": ("in_channels", 3), "H": ("in_h", 32), "W": ("in_w", 32),
    "k": ("out_channels", 32), "y": ("fil_h", 3), "x": ("fil_w", 3), "p": ("pad_h", 0), "q": ("pad_w", 0),
    "u": ("conv_stride_h", 1), "v": ("conv_stride_w", 1), "l": ("dilation_h", 1), "j": ("dilation_w", 1),
    "g": ("group_count", 1), "F": ("forw", 0), "_": ("spatial_dim", 2), "m": ("mode", "conv"),
    "I": ("in_layout", "NCHW"), "O": ("out_layout", "NCHW"), "f": ("fil_layout", "NCHW"), "b": ("bias", 0),
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


def is_forward_2d(line: str) -> bool:
    if line in ROCMLIR_LINES:
        return False
    _, v = independent_reading(line)
    return v["F"] == 1 and v["_"] == 2 and v["m"] == "conv" and all(len(v[k]) == 4 for k in "IOf")


FORWARD_2D = [line for line in CONV_LINES if is_forward_2d(line)]


def test_corpus_has_the_expected_forward_2d_lines():
    assert len(FORWARD_2D) == 20
    assert len(ROCMLIR_LINES) == 5


@pytest.mark.parametrize("line", FORWARD_2D)
def test_every_forward_2d_corpus_line_parses_to_the_right_signature(line):
    dtype, v = independent_reading(line)
    signature = BooOpRegistry.parse_command(line)
    assert isinstance(signature, ConvSignature)
    assert signature.dtype == dtype
    assert signature.input_shape == (v["n"], v["c"], v["H"], v["W"])
    assert signature.kernel_shape == (v["k"], v["c"] // v["g"], v["y"], v["x"])
    assert signature.stride == (v["u"], v["v"])
    assert signature.padding == (v["p"], v["q"])
    assert signature.dilation == (v["l"], v["j"])
    assert signature.groups == v["g"]
    assert (signature.input_layout, signature.kernel_layout, signature.output_layout) == (v["I"], v["f"], v["O"])
    assert signature.bias == bool(v["b"])
    assert_round_trip(signature)


def test_spot_checks():
    nhwc = BooOpRegistry.parse_command(FORWARD_2D[0])
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
    grouped = BooOpRegistry.parse_command("conv -n 2 -c 176 -H 28 -W 28 -k 176 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2 -g 176 -F 1")
    assert grouped.kernel_shape == (176, 1, 3, 3) and grouped.output_shape == (2, 176, 14, 14)
    asymmetric = BooOpRegistry.parse_command("conv -n 1 -c 4 -H 17 -W 17 -k 4 -y 1 -x 7 -p 0 -q 3 -F 1")
    assert asymmetric.padding == (0, 3) and asymmetric.output_shape == (1, 4, 17, 17)


@pytest.mark.parametrize("line", ROCMLIR_LINES)
def test_rocmlir_dialect_lines_fail_clearly(line):
    with pytest.raises(CommandError, match=r"bad value '\w+' for flag -f/--fil_layout: expected one of "
                                           r", NCHW, NHWC, CHWN, NCDHW, NDHWC"):
        BooOpRegistry.parse_command(line)


@pytest.mark.parametrize("line, pattern", [
    ("conv -n 1 -F 1 -m trans", r"transposed convolution \(-m trans\) is not supported yet"),
    ("conv -n 1", r"-F/--forw 0 asks for backward-data or backward-weight"),
    ("conv -n 1 -F 2", r"-F/--forw 2 asks for backward-data"),
    ("conv -n 1 -F 1 --spatial_dim 3", r"3-D convolution .* is not supported yet"),
    ("conv -n 1 -F 1 --in_layout NDHWC", r"3-D convolution .* is not supported yet"),
    ("convint8 -n 1 -F 1", r"base argument 'convint8': torch.int8 convolution is not supported"),
    ("conv -n 1 -F 1 --in_cast_type fp8", r"flag -U/--in_cast_type fp8 is not supported: cast types"),
    ("conv -n 1 -F 1 -d input.bin", r"flag -d/--in_data input.bin is not supported: BOO generates its own inputs"),
])
def test_unsupported_requests_are_refused_by_name(line, pattern):
    with pytest.raises(UnsupportedError, match=pattern):
        BooOpRegistry.parse_command(line)


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
    ("conv -n 1 -H 2 -y 5 -F 1", r"flag -H/--in_h 2 with filter 5, padding 0 and dilation 1 leaves no output",
     "-H/--in_h"),
    ("conv -n 0 -F 1", r"flag -n/--batchsize 0 must be at least 1", "-n/--batchsize"),
    ("conv -n 1 -p -1 -F 1", r"flag -p/--pad_h -1 must not be negative", "-p/--pad_h"),
    ("conv -n 1 -u 0 -F 1", r"flag -u/--conv_stride_h 0 must be at least 1", "-u/--conv_stride_h"),
    ("conv -n 1 -F 1 -b 2", r"flag -b/--bias must be 0 or 1", "-b/--bias"),
    ("conv -n 1 -F 1 --spatial_dim 4", r"flag -_/--spatial_dim 4: expected 2 or 3", "-_/--spatial_dim"),
])
def test_malformed_commands_name_the_flag(line, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        BooOpRegistry.parse_command(line)
    assert info.value.flag == flag


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
