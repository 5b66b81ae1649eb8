"""``boo_conv``: a convolution on torch tensors through a BOO kernel, differentiable."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from boo_core import ArgumentError, BooError, BooOpRegistry, Launchable, UnsupportedError, launchable_for
from boo_core.runtime.arguments import is_empty, require_int, require_ints, require_tensors
from boo_core.runtime.autograd import launch, reference_backward

from . import layouts
from .signature import ACTIVATIONS, ConvSignature

_WHERE = "boo_conv"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

logger = logging.getLogger(__name__)

IntOrTuple = int | Sequence[int]


@dataclass(frozen=True)
class _Call:
    """A boo_conv call resolved: tensors as stored, the memo key, and how to build the
    signature; ``logical`` holds x and w in logical layout, ``empty`` whether a tensor has
    no elements (then PyTorch computes the result, and no kernel is built)."""

    inputs: tuple[torch.Tensor, ...]
    key: tuple
    signature_args: dict
    explicit: bool
    logical: tuple[torch.Tensor, torch.Tensor]
    empty: bool

    def signature(self) -> ConvSignature:
        try:
            return ConvSignature(**self.signature_args)
        except ValueError as e:
            if isinstance(e, BooError):
                raise
            raise ArgumentError(f"{_WHERE}: {e}") from None

    def torch_forward(self, b: torch.Tensor | None, activation: str | None) -> torch.Tensor:
        """The result with PyTorch's convolution (for empty tensors), as boo_conv returns it."""
        a = self.signature_args
        try:
            y = torch.ops.aten.convolution(*self.logical, b, list(a["stride"]), list(a["padding"]),
                                           list(a["dilation"]), a["transposed"], list(a["output_padding"]),
                                           a["groups"])
        except RuntimeError as e:
            raise ArgumentError(f"{_WHERE}: {e}") from None
        if activation:
            y = ACTIVATIONS[activation](y)
        return layouts.permute(y, layouts.to_physical(a["output_layout"])) if self.explicit else y


def boo_conv(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    *,
    stride: IntOrTuple = 1,
    padding: IntOrTuple | str = 0,
    dilation: IntOrTuple = 1,
    groups: int = 1,
    transposed: bool = False,
    output_padding: IntOrTuple = 0,
    activation: str | None = None,
    shared_layout: str | None = None,
    input_layout: str | None = None,
    kernel_layout: str | None = None,
    output_layout: str | None = None,
) -> torch.Tensor:
    """A 1-D, 2-D or 3-D convolution (or transposed convolution) with a BOO kernel.

    Without layout arguments it behaves like ``torch.nn.functional.conv{1,2,3}d`` (or
    ``conv_transpose*d`` with ``transposed=True``): tensors have logical shapes (N, C, ...)
    and any memory format. A contiguous tensor is read as NC(D)HW; otherwise a tensor whose
    strides are channels-last (``torch.channels_last``, ``channels_last_3d``, or NWC for 1-D)
    is read in place as N(D)HWC; any other strides are copied to contiguous first. A tensor
    that is both contiguous and channels-last (C == 1, or 1x1 spatial) counts as contiguous,
    except a filter, which then takes the input's layout (kernel libraries key on one layout).
    The result has the input's memory format, as with torch.

    With ``shared_layout``, ``input_layout``, ``kernel_layout`` or ``output_layout``, tensors
    are passed in their layout's shape instead (an NHWC input is (N, H, W, C), an NHWC
    filter (K, Y, X, C/groups)) and must be contiguous.

    ``padding`` may also be ``"valid"`` or ``"same"`` (stride 1), as in torch.
    ``activation`` (relu, gelu, silu, sigmoid, tanh) fuses into the kernel after the bias.
    Gradients use BOO kernels with ``BOO_USE_BACKWARD_KERNELS=1``, PyTorch's otherwise.
    """
    call = _resolve(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    transposed=transposed, output_padding=output_padding, activation=activation,
                    shared_layout=shared_layout, input_layout=input_layout, kernel_layout=kernel_layout,
                    output_layout=output_layout)
    if call.empty:  # as torch does: an empty result where it gives one; no kernel
        return call.torch_forward(b, activation)
    launchable = launchable_for(call.key, call.signature, x.device)
    y = launch(launchable, *call.inputs, backward=_conv_backward(launchable))
    if call.explicit:
        return y
    return layouts.permute(y, layouts.to_logical(launchable.signature.output_layout))


def bound_conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
               **options) -> Callable[..., torch.Tensor | None] | None:
    """``boo_conv(x, w, b, **options)`` for tensors with exactly these tensors' metadata,
    settled now: the returned function permutes, launches and permutes back, and returns
    None (launching nothing) for tensors it was not bound for. None where boo_conv would
    copy x or run no kernel. Outside autograd only (a compiled graph's node)."""
    call = _resolve(x, w, b, **options)
    if call.empty or call.explicit or call.logical[0] is not x:
        return None
    launchable = launchable_for(call.key, call.signature, x.device)
    to_x, to_w = (layouts.to_physical(call.signature_args[k]) for k in ("input_layout", "kernel_layout"))
    to_y = layouts.to_logical(launchable.signature.output_layout)

    def run(x: torch.Tensor, w: torch.Tensor, *b: torch.Tensor) -> torch.Tensor | None:
        # A compiler may hand over a tensor in another memory format than it said it would
        # (Inductor does): it is copied into the bound layout.
        y = launchable.try_call(layouts.permute(x, to_x).contiguous(), layouts.permute(w, to_w).contiguous(), *b)
        return None if y is None else layouts.permute(y, to_y)

    # On a GPU, tensors laid out as bound go to the kernel as they are (the permutations are views).
    direct = launchable.bind((x, w) if b is None else (x, w, b), (_permuting(to_x), _permuting(to_w)),
                             (_permuting(to_y),))
    return run if direct is None else direct.or_else(run)


def _permuting(order: Sequence[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: layouts.permute(t, order)


def bound_conv_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, output_mask: Sequence[bool],
                        **options) -> Callable[..., tuple[torch.Tensor | None, ...] | None] | None:
    """:func:`boo_conv_backward` settled for these tensors, as :func:`bound_conv` is:
    ``run(dy, x, w) -> (dx, dw, db)`` or None for tensors it was not bound for."""
    call = _resolve(x, w, None, **options)
    if call.empty or call.explicit or call.logical[0] is not x:
        return None
    args = call.signature_args
    kernels = [launchable_for((call.key, mode), lambda mode=mode: replace(call.signature(), mode=mode), x.device)
               if wanted else None for mode, wanted in zip(("bwd", "wrw", "bwd_bias"), output_mask)]
    to_x, to_w, to_dy = (layouts.to_physical(args[k]) for k in ("input_layout", "kernel_layout", "output_layout"))
    from_x, from_w = layouts.to_logical(args["input_layout"]), layouts.to_logical(args["kernel_layout"])

    def run(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor | None, ...] | None:
        dy_stored = layouts.permute(dy, to_dy).contiguous()  # as boo_conv_backward does
        bwd, wrw, bias = kernels
        dx = dw = db = None
        if bwd is not None and (dx := bwd.try_call(dy_stored, layouts.permute(w, to_w).contiguous())) is None:
            return None
        if wrw is not None and (dw := wrw.try_call(dy_stored, layouts.permute(x, to_x).contiguous())) is None:
            return None
        if bias is not None and (db := bias.try_call(dy_stored)) is None:
            return None
        return (None if dx is None else layouts.permute(dx, from_x),
                None if dw is None else layouts.permute(dw, from_w), db)

    # On a GPU, tensors laid out as bound go to the kernels as they are (see bound_conv).
    bwd, wrw, bias = kernels
    direct = [None if bwd is None else bwd.bind((dy, w), (_permuting(to_dy), _permuting(to_w)), (_permuting(from_x),)),
              None if wrw is None else wrw.bind((dy, x), (_permuting(to_dy), _permuting(to_x)), (_permuting(from_w),)),
              None if bias is None else bias.bind((dy,), (_permuting(to_dy),))]
    if any(d is None and k is not None for d, k in zip(direct, kernels)):
        return run
    direct_dx, direct_dw, direct_db = direct

    def run_direct(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor | None, ...] | None:
        dx = dw = db = None
        if ((direct_dx is not None and (dx := direct_dx.try_launch(dy, w)) is None)
                or (direct_dw is not None and (dw := direct_dw.try_launch(dy, x)) is None)
                or (direct_db is not None and (db := direct_db.try_launch(dy)) is None)):
            return run(dy, x, w)
        return dx, dw, db

    return run_direct


def conv_signature_for(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, **options) -> ConvSignature:
    """The :class:`ConvSignature` that ``boo_conv(x, w, b, **options)`` runs."""
    return _resolve(x, w, b, **options).signature()


def boo_conv_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                      output_mask: Sequence[bool] = (True, True, True), **options) -> tuple[torch.Tensor | None, ...]:
    """Gradients of ``boo_conv(x, w, b, **options)`` for the output gradient ``dy``, on BOO kernels.

    Returns ``(dx, dw, db)``, None where ``output_mask`` is False, with the same conventions
    as :func:`boo_conv` (logical shapes and memory formats, or the layouts' shapes when
    layout options are given). ``activation`` is not allowed: pass the gradient before it.
    """
    if options.get("activation"):
        raise UnsupportedError("boo_conv_backward takes the gradient before the activation; drop activation=")
    call = _resolve(x, w, None, **options)
    out_layout = call.signature_args["output_layout"]
    dy = require_tensors("boo_conv_backward", {"dy": dy, "x": x}, dtypes=_DTYPES)["dy"]
    if call.empty or is_empty(dy):
        return _torch_gradients(call, dy, output_mask)
    dy_stored = dy if call.explicit else layouts.permute(dy, layouts.to_physical(out_layout))
    dy_stored = dy_stored.contiguous()
    x_stored, w_stored = call.inputs
    results: list[torch.Tensor | None] = []
    for mode, needed, operand, layout in (("bwd", output_mask[0], w_stored, call.signature_args["input_layout"]),
                                          ("wrw", output_mask[1], x_stored, call.signature_args["kernel_layout"]),
                                          ("bwd_bias", output_mask[2], None, None)):
        if not needed:
            results.append(None)
            continue
        launchable = launchable_for((call.key, mode), lambda mode=mode: replace(call.signature(), mode=mode),
                                    x.device)
        grad = launchable(dy_stored) if operand is None else launchable(dy_stored, operand)
        results.append(grad if layout is None or call.explicit else layouts.permute(grad, layouts.to_logical(layout)))
    return tuple(results)


def _resolve(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *, stride: IntOrTuple = 1,
             padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1, transposed: bool = False,
             output_padding: IntOrTuple = 0, activation: str | None = None, shared_layout: str | None = None,
             input_layout: str | None = None, kernel_layout: str | None = None,
             output_layout: str | None = None) -> _Call:
    tensors = require_tensors(_WHERE, {"x": x, "w": w, "b": b}, dtypes=_DTYPES, optional=("b",))
    x, w, b = tensors["x"], tensors["w"], tensors.get("b")
    rank = x.dim() - 2
    if rank not in layouts.LOGICAL or w.dim() != x.dim():
        raise ArgumentError(f"boo_conv: x has {x.dim()} dims and w has {w.dim()}; expected 3, 4 or 5 each")
    b = None if b is None else b.contiguous()
    stride = require_ints(_WHERE, "stride", stride, rank, minimum=1)
    dilation = require_ints(_WHERE, "dilation", dilation, rank, minimum=1)
    output_padding = require_ints(_WHERE, "output_padding", output_padding, rank, minimum=0)
    groups = require_int(_WHERE, "groups", groups, minimum=1)
    if not isinstance(padding, str):
        padding = require_ints(_WHERE, "padding", padding, rank, minimum=0)
    transposed = bool(transposed)
    if activation is not None and activation not in ACTIVATIONS:
        raise UnsupportedError(f"{_WHERE}: activation {activation!r} is not supported; use one of "
                               f"{', '.join(ACTIVATIONS)}")
    for name, value in (("shared_layout", shared_layout), ("input_layout", input_layout),
                        ("kernel_layout", kernel_layout), ("output_layout", output_layout)):
        if value is not None and not isinstance(value, str):
            raise ArgumentError(f"{_WHERE}: {name} must be a layout string such as 'NHWC', got {value!r}")
    explicit = any(v is not None for v in (shared_layout, input_layout, kernel_layout, output_layout))
    if explicit:
        default = (shared_layout or layouts.LOGICAL[rank]).upper()
        in_layout, w_layout = (input_layout or default).upper(), (kernel_layout or default).upper()
        out_layout = (output_layout or default).upper()
        for name, layout in (("input_layout", in_layout), ("kernel_layout", w_layout), ("output_layout", out_layout)):
            if not layouts.is_layout(layout, rank):
                raise ArgumentError(f"boo_conv: {name} {layout!r} does not fit a {x.dim()}-D tensor")
        x_logical = layouts.permute(x, layouts.to_logical(in_layout))
        w_logical = layouts.permute(w, layouts.to_logical(w_layout))
    else:
        x_logical, in_layout = _as_stored(x, "x")
        w_logical, w_layout = _as_stored(w, "w", prefer=in_layout)
        out_layout = in_layout

    if isinstance(padding, str):
        if transposed:
            raise UnsupportedError(f"padding={padding!r} is not supported for transposed convolutions")
        before, after = _string_padding(padding, rank, tuple(w_logical.shape[2:]), stride, dilation)
        if before != after:  # asymmetric "same": pad explicitly (a copy), as torch does
            pads = [p for pair in zip(reversed(before), reversed(after)) for p in pair]
            x_logical, in_layout = _as_stored(F.pad(x_logical, pads), "x")  # F.pad keeps the memory format
            if not explicit:
                out_layout = in_layout
            before = (0,) * rank
        padding = before

    empty = is_empty(x_logical, w_logical, b)
    if not empty:
        _check_shapes(x_logical, w_logical, b, stride, padding, dilation, groups, transposed, output_padding)
    x_stored = layouts.permute(x_logical, layouts.to_physical(in_layout))
    w_stored = layouts.permute(w_logical, layouts.to_physical(w_layout))
    arguments = dict(input_shape=tuple(x_logical.shape), kernel_shape=tuple(w_logical.shape), stride=stride,
                     padding=padding, dilation=dilation, groups=groups, dtype=x.dtype, input_layout=in_layout,
                     kernel_layout=w_layout, output_layout=out_layout, bias=b is not None, transposed=transposed,
                     output_padding=output_padding, activation=activation)
    key = ("conv", *(_hashable(v) for v in arguments.values()))
    inputs = (x_stored, w_stored) if b is None else (x_stored, w_stored, b)
    return _Call(inputs, key, arguments, explicit, (x_logical, w_logical), empty)


def _check_shapes(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: tuple[int, ...],
                  padding: tuple[int, ...], dilation: tuple[int, ...], groups: int, transposed: bool,
                  output_padding: tuple[int, ...]) -> None:
    """Logical x and w fit together (channels, groups, bias, a non-empty output), named."""
    c = x.shape[1]
    if transposed:
        k = w.shape[1] * groups
        if w.shape[0] != c or c % groups:
            raise ArgumentError(f"{_WHERE}: x has {c} channels; a transposed convolution's w (logical shape "
                                f"{tuple(w.shape)}) needs w.shape[0] == {c}, and groups={groups} must divide it")
    else:
        k = w.shape[0]
        if w.shape[1] * groups != c or k % groups:
            raise ArgumentError(f"{_WHERE}: x has {c} channels but w (logical shape {tuple(w.shape)}) with "
                                f"groups={groups} takes {w.shape[1] * groups}, and groups must divide its "
                                f"{k} output channels")
    if b is not None and tuple(b.shape) != (k,):
        raise ArgumentError(f"{_WHERE}: b has shape {tuple(b.shape)}; expected ({k},), one value per output channel")
    for i, (n, f, s, p, d, op) in enumerate(zip(x.shape[2:], w.shape[2:], stride, padding, dilation,
                                                 output_padding)):
        if transposed:
            if op >= s and op >= d:
                raise ArgumentError(f"{_WHERE}: output_padding {output_padding} must be smaller than the stride "
                                    f"{stride} or the dilation {dilation}")
            size = s * (n - 1) + d * (f - 1) + 1 - 2 * p + op
        else:
            if op:
                raise ArgumentError(f"{_WHERE}: output_padding {output_padding} applies to transposed "
                                    "convolutions only")
            size = (n + 2 * p - d * (f - 1) - 1) // s + 1
        if size < 1:
            raise ArgumentError(f"{_WHERE}: spatial dim {i} of x (size {n}, padding {p}) is too small for the "
                                f"filter (size {f}, dilation {d}): the output would be empty")


def _torch_gradients(call: _Call, dy: torch.Tensor, output_mask: Sequence[bool]) -> tuple[torch.Tensor | None, ...]:
    """``boo_conv_backward`` with PyTorch (for empty tensors), in boo_conv's conventions."""
    a = call.signature_args
    x, w = call.logical
    dy_logical = layouts.permute(dy, layouts.to_logical(a["output_layout"])) if call.explicit else dy
    mask = [bool(m) for m in output_mask]
    try:
        dx, dw, db = torch.ops.aten.convolution_backward(
            dy_logical, x, w, [w.shape[1] * a["groups"] if a["transposed"] else w.shape[0]] if mask[2] else None,
            list(a["stride"]), list(a["padding"]), list(a["dilation"]), a["transposed"], list(a["output_padding"]),
            a["groups"], mask)
    except RuntimeError as e:
        raise ArgumentError(f"boo_conv_backward: {e}") from None
    if call.explicit:
        dx = None if dx is None else layouts.permute(dx, layouts.to_physical(a["input_layout"]))
        dw = None if dw is None else layouts.permute(dw, layouts.to_physical(a["kernel_layout"]))
    return dx, dw, db


def _hashable(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _as_stored(t: torch.Tensor, name: str, prefer: str | None = None) -> tuple[torch.Tensor, str]:
    """A logical-shaped tensor and the layout its memory is in (see :func:`boo_conv`):
    ``prefer`` where the memory is in that layout too (a 1x1 filter is both NCHW and NHWC)."""
    rank = t.dim() - 2
    if prefer is not None and layouts.permute(t, layouts.to_physical(prefer)).is_contiguous():
        return t, prefer
    if t.is_contiguous():
        return t, layouts.LOGICAL[rank]
    channels_last = layouts.channels_last(rank)
    if layouts.permute(t, layouts.to_physical(channels_last)).is_contiguous():
        return t, channels_last
    logger.debug("boo_conv: %s has strides %s that no layout describes; copying it", name, t.stride())
    return t.contiguous(), layouts.LOGICAL[rank]


def _string_padding(padding: str, rank: int, window: tuple[int, ...], stride: IntOrTuple,
                    dilation: IntOrTuple) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Padding before and after each spatial dim for torch's ``"valid"`` and ``"same"``."""
    if padding == "valid":
        return (0,) * rank, (0,) * rank
    if padding != "same":
        raise ArgumentError(f"boo_conv: padding {padding!r} must be an int, a tuple, 'valid' or 'same'")
    strides = (stride,) * rank if isinstance(stride, int) else tuple(stride)
    if any(s != 1 for s in strides):
        raise ArgumentError("boo_conv: padding='same' needs stride 1 (as in torch)")
    dilations = (dilation,) * rank if isinstance(dilation, int) else tuple(dilation)
    totals = [d * (k - 1) for d, k in zip(dilations, window)]
    return tuple(t // 2 for t in totals), tuple(t - t // 2 for t in totals)


def _conv_backward(launchable: Launchable):
    """Gradients of a forward conv launchable: BOO kernels under BOO_USE_BACKWARD_KERNELS=1."""
    backward = launchable.derived.get("backward")
    if backward is None:
        backward = launchable.derived["backward"] = _make_conv_backward(launchable)
    return backward


def _make_conv_backward(launchable: Launchable):
    signature: ConvSignature = launchable.signature
    if signature.activation is not None:  # the activation's derivative needs the pre-activation output
        return reference_backward(launchable)
    layout_options = dict(stride=signature.stride, padding=signature.padding, dilation=signature.dilation,
                          groups=signature.groups, transposed=signature.transposed,
                          output_padding=signature.output_padding, input_layout=signature.input_layout,
                          kernel_layout=signature.kernel_layout, output_layout=signature.output_layout)

    def backward(inputs, grads, needs):
        dy, x, w = grads[0], inputs[0], inputs[1]
        mask = (needs[0], needs[1], len(inputs) > 2 and needs[2])
        if BooOpRegistry.backward_kernels_for("conv", x.device.type):
            gradients = boo_conv_backward(dy, x, w, mask, **layout_options)
        else:
            gradients = _torch_backward(signature, dy, x, w, mask)
        return list(gradients[: len(inputs)])

    return backward


def _torch_backward(signature: ConvSignature, dy, x, w, mask):
    """Gradients with PyTorch's convolution_backward, in logical layout, returned as stored."""
    dy_l = layouts.permute(dy, layouts.to_logical(signature.output_layout))
    x_l = layouts.permute(x, layouts.to_logical(signature.input_layout))
    w_l = layouts.permute(w, layouts.to_logical(signature.kernel_layout))
    dx, dw, db = torch.ops.aten.convolution_backward(
        dy_l, x_l, w_l, [signature.output_channels] if mask[2] else None, list(signature.stride),
        list(signature.padding), list(signature.dilation), signature.transposed, list(signature.output_padding),
        signature.groups, list(mask))
    dx = layouts.permute(dx, layouts.to_physical(signature.input_layout)) if dx is not None else None
    dw = layouts.permute(dw, layouts.to_physical(signature.kernel_layout)) if dw is not None else None
    return dx, dw, db
