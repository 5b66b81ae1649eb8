"""Every conv command of the real-world corpus runs, shrunk to CPU scale, in each of its modes
(on CI, one per class of convolution the numerics tables leave out: representative.py).

Batch and spatial sizes are cut down (channels, filters, strides, padding, dilation, groups,
layouts, dtype and mode stay as the command has them); each signature is compared with the
independent float64 reference. The rocMLIR block is not MIOpenDriver syntax and must fail.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from boo_core import BooOpRegistry, CommandError
from boo_ops_conv import ConvSignature

from .representative import one_per_class
from .test_numerics import TABLE_ON_CI, check
from .test_parser import PARSEABLE, ROCMLIR_LINES


def shrunk(signature: ConvSignature) -> ConvSignature:
    """The same convolution on a batch of at most 2 and small images that still give output."""
    spatial = []
    for size, window, stride, pad, dilation in zip(signature.input_shape[2:], signature.window, signature.stride,
                                                   signature.padding, signature.dilation):
        if signature.transposed:
            spatial.append(min(size, 4))
        else:  # at least two output positions, so strides and padding still matter
            spatial.append(min(size, max(dilation * (window - 1) + 1 - 2 * pad + stride, 5)))
    n, c = signature.input_shape[:2]
    return replace(signature, input_shape=(min(n, 2), c, *spatial))


CASES = [(index, signature) for index, line in enumerate(PARSEABLE)
         for signature in BooOpRegistry.parse_signatures(line)]
#: On CI, each class of shrunk command (representative.conv_class) the numerics tables do not
#: already run, once; the rest under ``slow``.
SHRUNK = one_per_class([(f"line{i}-{s.mode}", shrunk(s)) for i, s in CASES], covered=TABLE_ON_CI)


def test_shrinking_keeps_the_filter_and_the_mode():
    for (_, signature), param in zip(CASES, SHRUNK, strict=True):
        [small] = param.values
        assert small.kernel_shape == signature.kernel_shape and small.mode == signature.mode


@pytest.mark.parametrize("signature", SHRUNK)
def test_corpus_command_runs_shrunk_and_matches_pytorch(signature):
    check(signature)


@pytest.mark.parametrize("line", ROCMLIR_LINES)
def test_rocmlir_block_fails_with_a_clear_message(line):
    with pytest.raises(CommandError, match=r"bad value '\w+' for flag -f/--fil_layout: expected one of"):
        BooOpRegistry.parse_signatures(line)
