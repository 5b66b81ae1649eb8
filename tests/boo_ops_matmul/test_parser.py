"""MIOpenDriver gemm commands -> MatmulSignature: shapes as MIOpen defines them, strict errors."""

from __future__ import annotations

import shlex

import pytest
import torch

from boo_core import BooOpRegistry, CommandError, UnsupportedError
from boo_core.testing import assert_round_trip
from boo_ops_matmul import MatmulSignature

from ..conftest import DATA

CORPUS = [line.strip() for line in (DATA / "miopen_commands.txt").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
GEMM_LINES = [line for line in CORPUS if any(token.startswith("gemm") for token in shlex.split(line)[:2])]

# An independent reading of MIOpenDriver's gemm flags: long name -> (short letter, default).
FLAGS = {"a_h": ("m", 256), "a_w": ("k", 256), "b_w": ("n", 256), "transA": ("u", 0), "transB": ("v", 0),
         "batch_count": ("b", 1), "isColMajor": ("C", 0)}
SHORT = {short: long for long, (short, _) in FLAGS.items()}


def independent_reading(line: str) -> dict[str, int]:
    tokens = shlex.split(line)
    tokens = tokens[1:] if tokens[0].endswith("MIOpenDriver") else tokens
    values = {long: default for long, (_, default) in FLAGS.items()}
    for flag, value in zip(tokens[1::2], tokens[2::2], strict=False):
        long = flag[2:] if flag.startswith("--") else SHORT.get(flag[1:])
        if long in values:
            values[long] = int(value)
    return values


def shapes(signature: MatmulSignature) -> list[tuple[int, ...]]:
    return [spec.shape for spec in (*signature.input_specs(), *signature.output_specs())]


def test_corpus_has_the_gemm_lines():
    assert len(GEMM_LINES) == 8


@pytest.mark.parametrize("line", GEMM_LINES)
def test_every_corpus_gemm_line_parses_with_miopen_meanings(line):
    v = independent_reading(line)
    signature = BooOpRegistry.parse_command(line)
    assert isinstance(signature, MatmulSignature)
    assert signature.dtype == torch.float16
    assert (signature.m, signature.k, signature.n) == (v["a_h"], v["a_w"], v["b_w"])
    assert (signature.trans_a, signature.trans_b, signature.col_major) == (
        bool(v["transA"]), bool(v["transB"]), bool(v["isColMajor"]))
    assert_round_trip(signature)


@pytest.mark.parametrize("line", ["gemm -m 64 -k 32 -n 128", "gemmfp16 --a_w 32 --a_h 64 --b_w 128"])
def test_m_is_the_height_of_a_and_k_its_width_unlike_iree_turbine(line):
    # MIOpen: A is M×K = 64×32, B is K×N = 32×128. iree-turbine would build 32×64 @ 64×128.
    assert shapes(BooOpRegistry.parse_command(line)) == [(64, 32), (32, 128), (64, 128)]


@pytest.mark.parametrize("extra, expected", [
    ("", [(6, 4), (4, 5), (6, 5)]),
    ("-u 1", [(4, 6), (4, 5), (6, 5)]),
    ("-v 1", [(6, 4), (5, 4), (6, 5)]),
    ("-u 1 -v 1", [(4, 6), (5, 4), (6, 5)]),
    ("-C 1", [(4, 6), (5, 4), (5, 6)]),
    ("-C 1 -u 1", [(6, 4), (5, 4), (5, 6)]),
    ("-C 1 -v 1", [(4, 6), (4, 5), (5, 6)]),
    ("-C 1 -u 1 -v 1", [(6, 4), (4, 5), (5, 6)]),
    ("-b 3", [(3, 6, 4), (3, 4, 5), (3, 6, 5)]),
    ("-b 1", [(6, 4), (4, 5), (6, 5)]),
    ("-B 0.5", [(6, 4), (4, 5), (6, 5), (6, 5)]),
    ("-B 0.5 -C 1 -b 2", [(2, 4, 6), (2, 5, 4), (2, 5, 6), (2, 5, 6)]),
    ("--bias 1 -v 1", [(6, 4), (5, 4), (5,), (6, 5)]),
    ("--bias 1 -B 2", [(6, 4), (4, 5), (6, 5), (5,), (6, 5)]),
])
def test_stored_shapes(extra, expected):
    # -m 6 -k 4 -n 5: inputs a, b[, c][, bias], then the output.
    assert shapes(BooOpRegistry.parse_command(f"gemm -m 6 -k 4 -n 5 {extra}")) == expected


@pytest.mark.parametrize("base, dtype", [
    ("gemm", torch.float32), ("gemmfp32", torch.float32), ("gemmfp16", torch.float16),
    ("gemmbfp16", torch.bfloat16)])
def test_base_arguments(base, dtype):
    signature = BooOpRegistry.parse_command(f"{base} -m 2 -k 3 -n 4")
    assert signature.dtype == dtype and all(s.dtype == dtype for s in signature.input_specs())
    assert signature.to_command().split()[0] == ("gemm" if base == "gemmfp32" else base)


def test_defaults_are_miopens():
    assert BooOpRegistry.parse_command("gemm") == MatmulSignature(m=256, n=256, k=256)
    assert BooOpRegistry.parse_command("gemm -F 0") == MatmulSignature(m=256, n=256, k=256)


def test_all_flags_long_and_short_agree():
    long = BooOpRegistry.parse_command(
        "gemmbfp16 --a_h 3 --a_w 5 --b_w 7 --transA 1 --transB 1 --alpha 0.5 --beta -2 --batch_count 4 "
        "--isColMajor 1 --forw 1 --bias 1 --activation gelu")
    short = BooOpRegistry.parse_command(
        "gemmbfp16 -m 3 -k 5 -n 7 -u 1 -v 1 -A 0.5 -B -2 -b 4 -C 1 -F 1 --bias 1 --activation gelu")
    assert long == short == MatmulSignature(m=3, n=7, k=5, batch=4, trans_a=True, trans_b=True, alpha=0.5,
                                            beta=-2.0, col_major=True, bias=True, activation="gelu",
                                            dtype=torch.bfloat16)


def test_log_prefix_and_program_are_stripped():
    line = "MIOpen(HIP): Command [LogCmdGemm] /opt/rocm/bin/MIOpenDriver gemmfp16 -m 8192 -n 8192 -k 4096 -C 1"
    signature = BooOpRegistry.parse_command(line)
    assert shapes(signature) == [(4096, 8192), (8192, 4096), (8192, 8192)]


@pytest.mark.parametrize("signature", [
    MatmulSignature(m=1, n=1, k=1),
    MatmulSignature(m=7, n=5, k=3, batch=3, trans_a=True, col_major=True, dtype=torch.float16),
    MatmulSignature(m=7, n=5, k=3, alpha=0.1, beta=-1e-05, trans_b=True),
    MatmulSignature(m=7, n=5, k=3, alpha=1 / 3, beta=2.5e38),
    MatmulSignature(m=64, n=32, k=16, trans_b=True, bias=True, activation="silu", dtype=torch.bfloat16),
    MatmulSignature(m=4, n=4, k=4, batch=2, beta=1.0, bias=True, activation="relu", col_major=True),
], ids=lambda s: s.func_name)
def test_to_command_round_trips(signature):
    assert_round_trip(signature)


def test_signatures_normalize_their_fields():
    signature = MatmulSignature(m=2, n=3, k=4, trans_a=1, alpha=2, beta=-0.0)
    assert signature == MatmulSignature(m=2, n=3, k=4, trans_a=True, alpha=2.0, beta=0.0)
    assert signature.trans_a is True and str(signature.alpha) == "2.0" and str(signature.beta) == "0.0"
    assert len(signature.input_specs()) == 2  # beta -0.0 is no C


def test_readable_names_encode_every_field():
    base = MatmulSignature(m=7, n=5, k=3)
    assert base.func_name == "matmul_f32_b1m7n5k3_nn_rowmajor_alpha1p0_beta0p0"
    variants = [MatmulSignature(m=7, n=5, k=3, **change) for change in (
        {"batch": 2}, {"trans_a": True}, {"trans_b": True}, {"alpha": 1.5}, {"alpha": -1.5}, {"beta": 1e-05},
        {"col_major": True}, {"bias": True}, {"activation": "relu"}, {"dtype": torch.bfloat16})]
    assert len({v.func_name for v in [base, *variants]}) == len(variants) + 1


def test_run_flags_are_kept_apart_from_the_kernel():
    parsed = BooOpRegistry.parse("gemmfp16 -m 256 -n 512 -k 1024 -i 1 -V 1 -t 1 -p 1")
    assert parsed.run_options == {"iter": 1, "verify": 1, "time": 1, "wall": 0, "parallel": 1}
    assert parsed.signatures == (MatmulSignature(m=256, n=512, k=1024, dtype=torch.float16),)


@pytest.mark.parametrize("line, pattern", [
    ("gemmint8 -m 2", r"base argument 'gemmint8': matmul does not support i8 \(supported: f32, f16, bf16\)"),
    ("gemmfp64 -m 2", r"base argument 'gemmfp64': matmul does not support f64"),
    ("gemm -m 2 -F 2", r"flag -F/--forw 2: MIOpen's gemm has only a forward direction"),
])
def test_unsupported_requests_are_refused_by_name(line, pattern):
    with pytest.raises(UnsupportedError, match=pattern):
        BooOpRegistry.parse_command(line)


@pytest.mark.parametrize("line, pattern, flag", [
    ("gemm -m 0", r"flag -m/--a_h 0 must be at least 1", "-m/--a_h"),
    ("gemm -k -3", r"flag -k/--a_w -3 must be at least 1", "-k/--a_w"),
    ("gemm -n 0", r"flag -n/--b_w 0 must be at least 1", "-n/--b_w"),
    ("gemm -b 0", r"flag -b/--batch_count 0 must be at least 1", "-b/--batch_count"),
    ("gemm -u 2", r"flag -u/--transA 2 must be 0 or 1", "-u/--transA"),
    ("gemm -v -1", r"flag -v/--transB -1 must be 0 or 1", "-v/--transB"),
    ("gemm -C 3", r"flag -C/--isColMajor 3 must be 0 or 1", "-C/--isColMajor"),
    ("gemm --bias 2", r"flag --bias 2 must be 0 or 1", "--bias"),
    ("gemm -A nan", r"flag -A/--alpha nan must be finite", "-A/--alpha"),
    ("gemm -B inf", r"flag -B/--beta inf must be finite", "-B/--beta"),
    ("gemm -A half", r"bad value 'half' for flag -A/--alpha: expected a number", "-A/--alpha"),
    ("gemm -m 6.5", r"bad value '6.5' for flag -m/--a_h: expected an integer", "-m/--a_h"),
    ("gemm --activation tanh", r"bad value 'tanh' for flag --activation: expected one of relu, gelu, silu",
     "--activation"),
    ("gemm --activation RELU", r"bad value 'RELU' for flag --activation", "--activation"),
    ("gemm -m", r"flag -m/--a_h needs a value", "-m/--a_h"),
    ("gemm -m -k 4", r"flag -m/--a_h needs a value \(got the flag '-k'\)", "-m/--a_h"),
    ("gemm -x 4", r"unknown flag -x", "-x"),
    ("gemm --lda 4", r"unknown flag --lda", "--lda"),
    ("gemm -a_h=64", r"unknown flag -a_h=64 \(short flags are one letter; did you mean --a_h\?\)", "-a_h=64"),
    ("gemm -bias 1", r"unknown flag -bias \(short flags are one letter; did you mean --bias\?\)", "-bias"),
])
def test_malformed_commands_name_the_flag(line, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        BooOpRegistry.parse_command(line)
    assert info.value.flag == flag


@pytest.mark.parametrize("fields, error, pattern", [
    ({"m": 0}, ValueError, r"m must be a positive integer, got 0"),
    ({"k": 2.5}, ValueError, r"k must be a positive integer, got 2.5"),
    ({"batch": True}, ValueError, r"batch must be a positive integer, got True"),
    ({"alpha": float("inf")}, ValueError, r"alpha must be finite, got inf"),
    ({"beta": 1e39, "dtype": torch.float16}, ValueError, r"beta 1e\+39 is out of f32's range"),
    ({"activation": "tanh"}, UnsupportedError, r"activation 'tanh' is not supported; use None, relu, gelu, silu"),
    ({"dtype": torch.float64}, UnsupportedError, r"matmul dtype torch.float64 is not supported"),
])
def test_invalid_signatures_are_refused(fields, error, pattern):
    with pytest.raises(error, match=pattern):
        MatmulSignature(**{"m": 2, "n": 2, "k": 2, **fields})


def test_alpha_and_beta_may_exceed_the_half_range_the_epilogue_runs_in_float32():
    """The epilogue runs in float32 whatever the dtype: -A 1e5 is a valid f16 gemm (MIOpen's
    alpha and beta are floats too)."""
    signature = BooOpRegistry.parse_command("gemmfp16 -m 4 -n 4 -k 4 -A 1e5 -B 3e38")
    assert (signature.alpha, signature.beta) == (1e5, 3e38)


def test_flops_bytes_and_accumulation_length():
    plain = MatmulSignature(m=6, n=5, k=4, batch=3, dtype=torch.float16)
    assert plain.flops == 3 * 2 * 6 * 5 * 4 and plain.accumulation_length == 4
    assert plain.bytes_moved == 2 * 3 * (6 * 4 + 4 * 5 + 6 * 5)
    full = MatmulSignature(m=6, n=5, k=4, alpha=2.0, beta=1.0, bias=True, activation="relu")
    assert full.flops == 6 * 5 * (2 * 4 + 1 + 2 + 1 + 1)
    assert full.bytes_moved == 4 * (6 * 4 + 4 * 5 + 6 * 5 + 5 + 6 * 5)



@pytest.mark.parametrize("command, pattern, flag", [
    ("gemm -m 2147483648", r"^flag -m/--a_h 2147483648 must be at most 2147483647$", "-m/--a_h"),
    ("gemm -k ٣", r"^bad value '٣' for flag -k/--a_w: expected an integer$", "-k/--a_w"),
    ("gemm -A ١.٥", r"^bad value '١.٥' for flag -A/--alpha: expected a number$", "-A/--alpha"),
    ("gemm -B 1e999", r"^flag -B/--beta 1e999 must be finite$", "-B/--beta"),
    ("gemm -m 2147483647 -k 2147483647 -n 1", r"^matmul_f32_b1m2147483647n1k2147483647_\S+: tensor a of shape "
     r"\(2147483647, 2147483647\) would take 1\.84e\+19 bytes", None),
    ("gemm -m 65536 -n 65536 -k 1 -b 65536", r"tensor out of shape \(65536, 65536, 65536\) would take 1\.13e\+15 bytes",
     None),
    ("gemm -m 4 -n 4 -k 4 -A 1e39", r"^alpha 1e\+39 is out of f32's range \(magnitude at most 3\.40282e\+38\), the "
     r"dtype the kernel computes it in \(flag -A/--alpha\)$", "-A/--alpha"),
    ("gemmbfp16 -m 4 -n 4 -k 4 -B -3.5e38", r"^beta -3\.5e\+38 is out of f32's range \(magnitude at most "
     r"3\.40282e\+38\)", "-B/--beta"),
])
def test_hostile_commands_are_refused_by_name(command, pattern, flag):
    with pytest.raises(CommandError, match=pattern) as info:
        BooOpRegistry.parse_command(command)
    assert info.value.flag == flag
