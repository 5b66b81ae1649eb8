"""MIOpenDriver ``CBAInfer`` commands <-> ConvBatchNormActivationSignature.

The flag table is MIOpenDriver's (``driver/CBAInferFusion_driver.hpp``), with its defaults:
the 2-D convolution's ``-n -c -H -W -k -g -y -x -u -v -p -q -l -j -z``, ``-F/--fusion_mode``
(0 cbna, 1 cna, 2 na, 3 cn, 4 cba, 5 ca, 6 cb: which of conv, bias, batch norm and
activation run), ``-M/--bnMode`` (0 per-activation, 1 spatial), ``-m/--activMode``
(``miopenActivationMode_t``, 3 relu) and its ``-A/-B/-G`` alpha, beta and gamma. BOO adds
``--epsilon`` (default MIOpenDriver's 1e-3), ``--layout NHWC`` (default NCHW, the only
layout MIOpen's fusion takes) and ``--residual 1`` (a tensor of y's shape added before the
activation): what a channels-last model's conv, batch norm and skip connection need. Unlike the
other drivers, ``-F`` selects the fusion, not a direction: CBAInfer only runs forward.
"""

from __future__ import annotations

import math

from boo_core import CommandParser, Flag, FlagKind, ParsedFlags
from boo_core.signatures.flags import (
    indexed,
    integer,
    non_negative,
    number,
    one_of,
    positive,
    switch,
    text,
    upper,
)

from .cba_signature import ACTIVATION_MODES, BN_MODES, EPSILON, FUSION_MODES, LAYOUTS, ConvBatchNormActivationSignature

RUN = FlagKind.RUN


def _pad_mode(value: str) -> str:
    """MIOpenDriver's default ``-z`` is "conv", which it treats as "default"."""
    value = value.lower()
    return "default" if value == "conv" else value


CBA_FLAGS: tuple[Flag, ...] = (
    Flag("batchsize", "n", 32, positive, "N: batch size", field="n"),
    Flag("in_channels", "c", 3, positive, "C: input channels", field="c"),
    Flag("in_h", "H", 32, positive, "input height", field="h"),
    Flag("in_w", "W", 32, positive, "input width", field="w"),
    Flag("out_channels", "k", 32, positive, "K: output channels", field="k"),
    Flag("group_count", "g", 1, positive, "groups", field="groups"),
    Flag("fil_h", "y", 3, positive, "filter height", field="fil_h"),
    Flag("fil_w", "x", 3, positive, "filter width", field="fil_w"),
    Flag("conv_stride_h", "u", 1, positive, "stride in height", field="stride_h"),
    Flag("conv_stride_w", "v", 1, positive, "stride in width", field="stride_w"),
    Flag("pad_h", "p", 0, non_negative, "padding in height", field="pad_h"),
    Flag("pad_w", "q", 0, non_negative, "padding in width", field="pad_w"),
    Flag("dilation_h", "l", 1, positive, "dilation in height", field="dilation_h"),
    Flag("dilation_w", "j", 1, positive, "dilation in width", field="dilation_w"),
    Flag("pad_mode", "z", "default", one_of("default", "same", "valid", case=_pad_mode),
         "default (use -p/-q), same or valid", field="pad_mode"),
    Flag("fusion_mode", "F", "cbna", indexed(*FUSION_MODES), "0 cbna, 1 cna, 2 na, 3 cn, 4 cba, 5 ca, 6 cb "
         "(c conv, b bias, n batch norm, a activation)", field="fusion"),
    Flag("bnMode", "M", "per_activation", indexed(*BN_MODES), "batch norm: 0 per-activation, 1 spatial",
         field="bn_mode"),
    Flag("activMode", "m", "relu", indexed(*ACTIVATION_MODES), "activation: 0 passthru, 1 logistic, 2 tanh, "
         "3 relu, 4 softrelu, 5 abs, 6 power, 7 clippedrelu, 8 leakyrelu, 9 elu", field="activation"),
    Flag("alpha", "A", 1.0, number, "activation alpha", field="alpha"),
    Flag("beta", "B", 0.0, number, "activation beta", field="beta"),
    Flag("gamma", "G", 1.0, number, "activation gamma", field="gamma"),
    Flag("epsilon", None, EPSILON, number, "BOO extension: the batch norm's epsilon (MIOpenDriver's is 1e-3)",
         field="eps", omit_default=True),
    Flag("layout", None, "NCHW", one_of(*LAYOUTS, case=upper), "BOO extension: NCHW, or NHWC for x, the "
         "filter (K, Y, X, C/groups) and y", field="layout", omit_default=True),
    Flag("residual", None, False, switch, "BOO extension: 1 adds a last input r of y's shape and layout "
         "before the activation (a skip connection)", field="residual", omit_default=True),
    # Read by BOO's tools or meaningless for BOO's kernels; never part of a signature.
    Flag("iter", "i", 1, positive, "timed iterations", RUN),
    Flag("time", "t", 0, integer, "1: report kernel time (BOO always times)", RUN),
    Flag("wall", "w", 0, integer, "wall-clock timing (MIOpen option; BOO always times)", RUN),
    Flag("verify", "V", 1, integer, "1: check numerics against a reference", RUN),
    Flag("pad_val", "r", 0, integer, "padding value (MIOpen ignores it too)", RUN),
    Flag("dot_graph", "D", "", text, "MIOpen: write the fusion plan's metadata graph", FlagKind.REFUSED,
         "BOO's fused kernel has no MIOpen fusion metadata graph"),
)


class CBAInferParser(CommandParser):
    """Parses ``CBAInfer``, ``CBAInferfp16`` and ``CBAInferbfp16`` commands."""

    flags = CBA_FLAGS
    signature_class = ConvBatchNormActivationSignature

    def check(self, flags: ParsedFlags) -> None:
        eps = flags["epsilon"]
        flags.require("epsilon", math.isfinite(eps) and eps > 0, "must be finite and positive")
        if flags["fusion_mode"] == "na":
            return  # no convolution: its flags describe nothing
        groups, c, k = flags["group_count"], flags["in_channels"], flags["out_channels"]
        flags.require("group_count", c % groups == 0 and k % groups == 0,
                      f"must divide in_channels {c} and out_channels {k}")
