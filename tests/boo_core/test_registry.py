"""Command -> op resolution: exact keyword + dtype suffix, prefixes, unknown ops."""

from __future__ import annotations

import pytest
import torch

from boo_core import BooOpRegistry, CommandError, UnknownOpError


@pytest.mark.parametrize("base, dtype", [
    ("scale", torch.float32),
    ("scalefp32", torch.float32),
    ("scalefp16", torch.float16),
    ("scalebfp16", torch.bfloat16),
])
def test_base_argument_is_keyword_plus_dtype_suffix(scale_registry, base, dtype):
    resolved = scale_registry.resolve_base(base)
    assert resolved.op.name == "scale"
    assert resolved.dtype == dtype
    assert BooOpRegistry.parse_command(f"{base} -n 3").dtype == dtype


@pytest.mark.parametrize("base", ["scal", "scales", "xscale", "scalefp17", "Scale", "scale16"])
def test_keyword_is_matched_exactly_never_by_substring(scale_registry, base):
    with pytest.raises(UnknownOpError,
                       match=rf"unknown op '{base}'; installed ops: scale \(scale, from \(plugin scale\)\)"):
        scale_registry.resolve_base(base)


def test_parse_command_accepts_strings_token_lists_and_log_prefixes(scale_registry):
    expected = BooOpRegistry.parse_command("scale -n 6 -f 3")
    assert BooOpRegistry.parse_command(["scale", "-n", "6", "-f", "3"]) == expected
    logged = "MIOpen(HIP): Command [LogCmdScale] ./bin/MIOpenDriver scale -n 6 -f 3"
    assert BooOpRegistry.parse_command(logged) == expected
    assert BooOpRegistry.parse_command("MIOpenDriver scale --size=6 --factor=3") == expected


def test_command_with_several_modes(scale_registry):
    signatures = BooOpRegistry.parse_signatures("scale -n 2 -F 0")
    assert [s.mode for s in signatures] == ["fwd", "bwd"]
    with pytest.raises(CommandError, match=r"command runs 2 kernels \(scale_fwd_f32_n2_f2, scale_bwd_f32_n2_f2\); "
                                           r"use parse_signatures\(\)"):
        BooOpRegistry.parse_command("scale -n 2 -F 0")


def test_empty_command_is_an_error(scale_registry):
    with pytest.raises(CommandError, match="empty command"):
        BooOpRegistry.parse_command("MIOpenDriver")


def test_parse_errors_carry_the_command(scale_registry):
    with pytest.raises(CommandError, match="bad value 'x' for flag -n/--size") as info:
        BooOpRegistry.parse_command("scale -n x")
    assert info.value.command == "scale -n x"


def test_signature_class_maps_back_to_its_op(scale_registry):
    signature = BooOpRegistry.parse_command("scale -n 2")
    assert scale_registry.op_for_signature(signature).name == "scale"


def test_list_ops_and_get_op(scale_registry):
    assert [e.name for e in BooOpRegistry.list_ops()] == ["scale"]
    assert BooOpRegistry.get_op("scale").spec.keywords == ("scale",)
    with pytest.raises(UnknownOpError, match="no op named 'conv'; installed ops: scale"):
        BooOpRegistry.get_op("conv")
