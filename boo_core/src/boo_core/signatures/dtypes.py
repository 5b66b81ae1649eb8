"""MIOpen base-argument dtype suffixes and dtype naming used across BOO."""

from __future__ import annotations

import torch

# Suffix of an MIOpenDriver base argument -> element type ("convbfp16" = "conv" + "bfp16").
# "" and "fp32" both mean float32 (MIOpen's logger prints "layernormfp32", its driver
# accepts "convfp32").
SUFFIX_TO_DTYPE: dict[str, torch.dtype] = {
    "": torch.float32,
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bfp16": torch.bfloat16,
    "fp64": torch.float64,
    "int8": torch.int8,
}

# The suffix BOO writes for each dtype in a command it prints (the MIOpen spelling).
DTYPE_TO_SUFFIX: dict[torch.dtype, str] = {
    torch.float32: "",
    torch.float16: "fp16",
    torch.bfloat16: "bfp16",
    torch.float64: "fp64",
    torch.int8: "int8",
}

_SHORT_NAMES: dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int8: "i8",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.bool: "i1",
}

_BY_NAME: dict[str, torch.dtype] = {name: dtype for dtype, name in _SHORT_NAMES.items()}
_BY_NAME.update({"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float64": torch.float64, "fp32": torch.float32, "fp16": torch.float16,
                 "bfp16": torch.bfloat16})


def short_name(dtype: torch.dtype) -> str:
    """Short MLIR-style name of a dtype (``bf16``), used in function names and cache keys."""
    try:
        return _SHORT_NAMES[dtype]
    except KeyError:
        return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str | torch.dtype) -> torch.dtype:
    """Parse ``"bf16"``, ``"bfloat16"``, ``"torch.bfloat16"`` (or a dtype) into a torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    key = name.removeprefix("torch.").lower()
    try:
        return _BY_NAME[key]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(_BY_NAME))}") from None
