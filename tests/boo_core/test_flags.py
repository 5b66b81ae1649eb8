"""Flag value types: strict ASCII numbers, bounds, and the parser's tensor-size check."""

from __future__ import annotations

import pytest
import torch

from boo_core import CommandError
from boo_core.signatures.flags import (
    INT32_MAX,
    INT64_MAX,
    Integer,
    OutOfRange,
    integer,
    non_negative,
    number,
    one_of,
    positive,
    upper,
)
from boo_core.signatures.signature import (
    MAX_TENSOR_BYTES,
    TensorSpec,
    has_empty_tensor,
    representable_problem,
    require_representable,
    tensor_size_problem,
)
from boo_core.testing import isolated_registry

from .fake_plugins import scale_op


@pytest.mark.parametrize("text, value", [
    ("7", 7), ("+7", 7), ("-7", -7), ("007", 7), (" 7\t", 7), ("0" * 5000 + "12", 12), ("-0", 0),
    (str(INT64_MAX), INT64_MAX), (str(-INT64_MAX), -INT64_MAX),
])
def test_integers_are_ascii_digits_with_a_sign(text, value):
    assert integer(text) == value


@pytest.mark.parametrize("text", [
    "١٢",  # Arabic-Indic digits: int() reads 12
    "５",  # a fullwidth 5
    "²", "৩", "7\u00a0", "\u20077", "1_000", "1.5", "1e3", "0x10", "", "-", "+", "7 7", "nan",
])
def test_non_ascii_digits_and_other_texts_are_not_integers(text):
    with pytest.raises(ValueError, match=r"^expected an integer$") as info:
        integer(text)
    assert not isinstance(info.value, OutOfRange)


@pytest.mark.parametrize("kind, text, message", [
    (integer, str(INT64_MAX + 1), rf"^must be at most {INT64_MAX}$"),
    (integer, "1" * 309, rf"^must be at most {INT64_MAX}$"),
    (integer, "-" + "9" * 5000, rf"^must be at least {-INT64_MAX}$"),
    (positive, "0", r"^must be at least 1$"),
    (positive, str(INT32_MAX + 1), rf"^must be at most {INT32_MAX}$"),
    (positive, "-" + "1" * 60, r"^must be at least 1$"),
    (non_negative, "-1", r"^must not be negative$"),
    (Integer(2, 5), "1", r"^must be at least 2$"),
])
def test_integers_out_of_range_say_the_range(kind, text, message):
    with pytest.raises(OutOfRange, match=message):
        kind(text)


@pytest.mark.parametrize("text, value", [("1.5", 1.5), (".5", 0.5), ("5.", 5.0), ("-2e-3", -0.002), ("-0.0", 0.0),
                                         (" 3 ", 3.0), ("1e-400", 0.0)])
def test_numbers(text, value):
    result = number(text)
    assert result == value and str(result) == str(value)


@pytest.mark.parametrize("text, message", [
    ("٣.٥", r"^expected a number$"), ("1_0", r"^expected a number$"), ("0x1p3", r"^expected a number$"),
    ("1" * 65, r"^expected a number$"), ("inf", r"^must be finite$"), ("NaN", r"^must be finite$"),
    ("1e400", r"^must be finite$"),
])
def test_bad_numbers(text, message):
    with pytest.raises(ValueError, match=message):
        number(text)


def test_choices_are_ascii_before_case_folding():
    layout = one_of("NCHW", "NHWC", "NSS", case=upper)
    assert layout("nhwc") == "NHWC"
    with pytest.raises(ValueError, match=r"^expected one of NCHW, NHWC, NSS$"):
        layout("nß")  # "nß".upper() is "NSS"


def test_an_empty_choice_is_shown_as_such():
    layout = one_of("", "NCHW", "NHWC", case=upper)  # "": the op's default layout
    assert layout("") == ""
    with pytest.raises(ValueError, match=r"^expected one of '', NCHW, NHWC$"):
        layout("QQQ")


@pytest.mark.parametrize("command, message", [
    ("scale -n 0", r"^scale_fwd_f32_n0_f2: tensor x of shape \(0,\) has no elements$"),
    ("scale -n -3", r"^scale_fwd_f32_n_3_f2: tensor x of shape \(-3,\) has a size of -3$"),
    (f"scale -n {INT64_MAX}", r"^scale_fwd_f32_n9223372036854775807_f2: tensor x of shape \(9223372036854775807,\) "
                              r"would take 3.69e\+19 bytes; BOO accepts tensors of up to 2\*\*48 bytes \(256 TiB\)$"),
])
def test_the_parser_refuses_empty_or_oversized_tensors_of_any_op(command, message):
    """The scale test op declares no bounds of its own: the parser's check covers it."""
    with isolated_registry({"scale": scale_op}) as registry, pytest.raises(CommandError, match=message):
        registry.parse(command)


def test_the_largest_tensor_is_accepted():
    with isolated_registry({"scale": scale_op}) as registry:
        signature = registry.parse_command(f"scale -n {MAX_TENSOR_BYTES // 4}")
    assert signature.input_specs()[0].nbytes == MAX_TENSOR_BYTES
    assert tensor_size_problem(signature) is None and not has_empty_tensor(signature)


def test_tensor_size_problem_allows_empty_tensors_when_asked():
    signature = scale_op.ScaleSignature(size=0)
    assert has_empty_tensor(signature)
    assert tensor_size_problem(signature, allow_empty=True) is None
    assert TensorSpec("x", (0, 3), torch.float32).numel == 0


@pytest.mark.parametrize("size, problem", [
    (2.5, "tensor x of shape (2.5,) has a size of 2.5"),
    (True, "tensor x of shape (True,) has a size of True"),
    (-1, "tensor x of shape (-1,) has a size of -1"),
])
def test_tensor_size_problem_names_sizes_that_are_not_counts(size, problem):
    assert tensor_size_problem(scale_op.ScaleSignature(size=size), allow_empty=True) == problem


@pytest.mark.parametrize("value, dtype, problem", [
    (1e39, torch.float32, "is out of f32's range (magnitude at most 3.40282e+38)"),
    (-65505.0, torch.float16, "is out of f16's range (magnitude at most 65504)"),
    (3.4e38, torch.bfloat16, "is out of bf16's range (magnitude at most 3.38953e+38)"),
    (65504.0, torch.float16, None),
    (-3.4e38, torch.float32, None),
    (1e300, torch.float64, None),
])
def test_representable_problem_names_the_dtype_and_its_range(value, dtype, problem):
    assert representable_problem(value, dtype) == problem


def test_require_representable_names_the_field():
    signature = scale_op.ScaleSignature(size=4, factor=7e4)
    require_representable(signature, torch.float32, "factor")
    with pytest.raises(ValueError, match=r"^factor 70000 is out of f16's range \(magnitude at most 65504\), "
                                         r"the dtype the kernel computes it in$"):
        require_representable(signature, torch.float16, "factor")
