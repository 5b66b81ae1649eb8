"""MIOpenDriver ``bnorm`` commands <-> BatchNormSignature.

MIOpenDriver's flags and defaults (``driver/bn_driver.hpp``): ``-n/--batchsize`` 32,
``-c/--in_channels`` 3, ``-D/--in_d`` 0 (0: a 4-D input, else 5-D), ``-H/--in_h`` 32,
``-W/--in_w`` 32, ``-L/--layout`` NCHW (NHWC; NCDHW or NDHWC with ``-D``), ``-m/--mode``
0 per-activation or 1 spatial, ``-F/--forw`` 0 off, 1 training, 2 inference,
``-b/--back`` 0 or 1, ``-s/--save`` saved mean and inverse variance (outputs of the
training forward, inputs of the backward), ``-r/--run`` running mean and variance (updated
by the training forward, used by inference), ``-A/--alpha`` 1 and ``-B/--beta`` 0 (output
blending: BOO computes y = BN(x), alpha 1 and beta 0 only), and the run flags ``-i -V -t
-w -P``.

Directions, as MIOpenDriver runs them: ``-F 1`` or ``-F 2`` runs the forward; ``-b 1``
with ``-F 0`` runs the backward; ``-b 1`` with a forward runs the forward only (MIOpen
prints "Deactivate forward to run backward"; BOO logs it); ``-F 0 -b 0`` runs nothing,
which BOO refuses; a command that gives neither flag (iree-turbine's sample lines, with
``--save 1 --run 1``) runs the training forward. BOO adds ``--epsilon`` (default 1e-5) and
``--activation relu`` (batch norm + ReLU, one kernel: what torch.compile fuses) and
``--residual 1`` (a tensor like the input added before the activation: a residual block's
sum, which torch.compile fuses into a training batch norm). With ``-b 1`` both describe the
gradient the backward starts from, as torch.compile fuses it: ``--activation relu`` takes
the forward's output y and applies the ReLU's gradient first, ``--residual 1`` takes y's
gradient as two tensors it adds (dy, dy2) and returns their sum too. The
running statistics' update factor (torch's momentum, MIOpen's expAvgFactor) is an input of
the training kernel, not a flag: the driver draws it at random like every input.
"""

from __future__ import annotations

import logging
import math

import torch

from boo_core import CommandError, CommandParser, Flag, FlagKind, ParsedFlags, UnsupportedError
from boo_core.signatures.dtypes import DTYPE_TO_SUFFIX
from boo_core.signatures.flags import integer, non_negative, number, one_of, optional, positive, run_flags, upper
from boo_core.signatures.parser import format_command
from boo_core.signatures.signature import representable_problem

from .signature import ACTIVATIONS, FLOAT_DTYPES, BatchNormSignature, stats_dtype

logger = logging.getLogger(__name__)
RUN = FlagKind.RUN
_LAYOUTS = {"NCHW": (4, False), "NHWC": (4, True), "NCDHW": (5, False), "NDHWC": (5, True)}

BNORM_FLAGS: tuple[Flag, ...] = (
    Flag("forw", "F", 0, integer, "forward: 0 off, 1 training, 2 inference"),
    Flag("back", "b", 0, integer, "backward: 0 off, 1 on (with -F 0)"),
    Flag("batchsize", "n", 32, positive, "N"),
    Flag("in_channels", "c", 3, positive, "C"),
    Flag("in_d", "D", 0, non_negative, "D (0: a 4-D input)"),
    Flag("in_h", "H", 32, positive, "H"),
    Flag("in_w", "W", 32, positive, "W"),
    Flag("layout", "L", "NCHW", one_of(*_LAYOUTS, case=upper), "NCHW, NHWC (4-D); NCDHW, NDHWC (with -D)"),
    Flag("mode", "m", 0, integer, "0: per-activation; 1: spatial (per channel, as torch's BatchNorm)"),
    Flag("save", "s", 0, integer, "1: the training forward saves mean and inverse variance; the backward uses them"),
    Flag("run", "r", 0, integer, "1: the training forward updates running mean and variance; inference uses them"),
    Flag("alpha", "A", 1.0, number, "output scale (BOO: 1 only)"),
    Flag("beta", "B", 0.0, number, "output blend with the prior output (BOO: 0 only)"),
    Flag("epsilon", None, 1e-5, number, "BOO extension: epsilon added to the variance", omit_default=True),
    Flag("activation", None, None, optional(*ACTIVATIONS), "BOO extension: activation applied to y (forward); "
         "its gradient applied first (backward)", omit_default=True),
    Flag("residual", None, 0, integer, "BOO extension: 1 adds a tensor like the input to y before the activation "
         "(forward); y's gradient given as two tensors to add (backward)", omit_default=True),
    *run_flags(extra=(Flag("printconv", "P", 1, integer, "MIOpen: print the dimensions (no meaning for BOO)",
                           RUN),)),
)


class BatchNormParser(CommandParser):
    """Parses ``bnorm``, ``bnormfp16``, ``bnormbfp16`` commands, and MIOpen's mixed-precision
    spellings ``bnormfp16fp32`` and ``bnormbfp16fp32`` (16-bit data, float32 statistics,
    scale and bias), which are what BOO's ``bnormfp16`` and ``bnormbfp16`` are: their
    statistics are float32 already."""

    flags = BNORM_FLAGS
    dtypes = FLOAT_DTYPES
    suffixes = {"fp16fp32": torch.float16, "bfp16fp32": torch.bfloat16}

    def build(self, flags: ParsedFlags, *, base: str, dtype: torch.dtype) -> list[BatchNormSignature]:
        shape = _shape(flags)
        rank, channels_last = _LAYOUTS[flags["layout"]]
        if rank != len(shape):
            raise CommandError(f"flag {flags.label('layout')} {flags['layout']} does not fit the {len(shape)}-D input "
                               f"{'x'.join(map(str, shape))} (-D {flags['in_d']})", flag=flags.label("layout"))
        for name in ("mode", "save", "run"):
            flags.require(name, flags[name] in (0, 1), "must be 0 or 1")
        for name, only in (("alpha", 1.0), ("beta", 0.0)):
            if flags[name] != only:
                raise UnsupportedError(f"flag {flags.label(name)} {flags[name]}: BOO computes the batch norm itself "
                                       f"(alpha 1, beta 0), not a blend with a prior output", flag=flags.label(name))
        eps = flags["epsilon"]
        flags.require("epsilon", math.isfinite(eps) and eps >= 0, "must be finite and not negative")
        problem = representable_problem(eps, stats_dtype(dtype))
        flags.require("epsilon", problem is None, f"{problem}, the dtype the variance is computed in")
        common = dict(input_shape=shape, spatial=bool(flags["mode"]), channels_last=channels_last,
                      save=bool(flags["save"]), eps=eps, dtype=dtype)
        mode = _direction(flags)
        if flags["activation"] is not None:
            common["activation"] = flags["activation"]
        flags.require("residual", flags["residual"] in (0, 1), "must be 0 or 1")
        if flags["residual"]:
            common["residual"] = True
        if mode == "train" and flags["run"] and not flags["mode"] and shape[0] < 2:
            raise CommandError(f"flag {flags.label('batchsize')} 1: a per-activation running variance (-m 0 -r 1) "
                               "needs at least 2 samples", flag=flags.label("batchsize"))
        running = bool(flags["run"]) and mode != "bwd"
        return [BatchNormSignature(**common, mode=mode, running=running)]

    def format(self, signature: BatchNormSignature, keyword: str) -> str:
        n, c, *spatial = signature.input_shape
        if len(spatial) not in (2, 3):
            raise UnsupportedError(f"{signature.func_name}: MIOpenDriver's bnorm has no command for a "
                                   f"{len(signature.input_shape)}-D input (4-D or 5-D only)")
        d, h, w = spatial if len(spatial) == 3 else (0, *spatial)
        flag = self.flag
        forw, back = {"train": (1, 0), "infer": (2, 0), "bwd": (0, 1)}[signature.mode]
        items = [(flag("batchsize"), n), (flag("in_channels"), c)]
        items += [(flag("in_d"), d)] if d else []
        items += [(flag("in_h"), h), (flag("in_w"), w), (flag("mode"), int(signature.spatial)),
                  (flag("forw"), forw), (flag("back"), back), (flag("save"), int(signature.save)),
                  (flag("run"), int(signature.running)), (flag("layout"), signature.layout)]
        if signature.eps != 1e-5:
            items.append((flag("epsilon"), signature.eps))
        if signature.residual:
            items.append((flag("residual"), 1))
        if signature.activation:
            items.append((flag("activation"), signature.activation))
        return format_command(keyword + DTYPE_TO_SUFFIX[signature.dtype], items)


def _shape(flags: ParsedFlags) -> tuple[int, ...]:
    n, c, d, h, w = (flags[name] for name in ("batchsize", "in_channels", "in_d", "in_h", "in_w"))
    return (n, c, d, h, w) if d else (n, c, h, w)


def _direction(flags: ParsedFlags) -> str:
    forw, back = flags["forw"], flags["back"]
    flags.require("forw", forw in (0, 1, 2), "must be 0 (off), 1 (training) or 2 (inference)")
    flags.require("back", back in (0, 1), "must be 0 or 1")
    if forw and back:
        logger.warning("%s %d with %s 1: MIOpenDriver runs the forward only (give %s 0 to run the backward)",
                       flags.label("forw"), forw, flags.label("back"), flags.label("forw"))
    if forw:
        return "train" if forw == 1 else "infer"
    if not back and "forw" not in flags.given and "back" not in flags.given:
        return "train"  # a command naming neither (iree-turbine's samples): the training forward
    if not back:
        raise CommandError(f"flags {flags.label('forw')} 0 and {flags.label('back')} 0 run nothing: give -F 1 "
                           "(training forward), -F 2 (inference) or -b 1 (backward)", flag=flags.label("forw"))
    return "bwd"
