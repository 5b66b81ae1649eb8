"""BatchNormSignature: one batch-normalization kernel (training forward, inference forward
or backward), completely described."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from boo_core import Signature, TensorSpec, UnsupportedError
from boo_core.plugin import tolerance_for
from boo_core.signatures.dtypes import short_name
from boo_core.signatures.signature import require_representable

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MODES = ("train", "infer", "bwd")
#: Activations a forward may apply last (batch norm + ReLU, as convnets follow it).
ACTIVATIONS = {"relu": torch.relu}
#: How many times PyTorch's own float32 error on the same inputs a float32 kernel that
#: computes the statistics from x may err (``error_scales``).
_FLOAT32_SLACK = 4


def _accumulation_dtype(signature: BatchNormSignature, x: torch.Tensor) -> torch.dtype:
    """The stats dtype, or float64 for float64 tensors (the reference's own precision)."""
    return torch.float64 if x.dtype == torch.float64 else signature.stats_dtype


def _stage_group(rows: int, groups: int) -> int:
    """Rows per thread in a later stage of staged sums: the largest divisor of ``rows`` up to
    ``groups`` where one of at least a quarter of ``groups`` (and at least 2, so that every
    stage sums) exists (no padded copy of the partial sums, which costs a fill), else
    ``groups`` (the last group padded)."""
    divisor = max(d for d in range(1, groups + 1) if rows % d == 0)
    return divisor if 4 * divisor >= groups and divisor > 1 else groups


def _in_own_dispatch(t: torch.Tensor) -> torch.Tensor:
    """``t`` as it is, computed by a dispatch of its own. IREE fuses a small elementwise
    producer into the elementwise pass that broadcasts it and computes it again for every
    element (a batch norm's ``rsqrt`` once per element on the CPU); a sum over ``t`` and zeros
    is a reduction, which it does not fuse into a larger consumer."""
    return torch.stack([t, torch.zeros_like(t)]).sum(0)


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of every statistic (mean, inverse standard deviation, running mean and
    variance) and of every accumulation: at least float32."""
    return torch.promote_types(dtype, torch.float32)


@dataclass(frozen=True)
class BatchNormSignature(Signature):
    """Batch normalization of an ``(N, C, *spatial)`` input, as MIOpen and PyTorch define it.

    ``spatial=True`` (MIOpen's ``-m 1``, PyTorch's only mode) normalizes each channel over
    N and every spatial position: statistics and the scale and bias have shape ``(C,)``.
    ``spatial=False`` (``-m 0``, per-activation) normalizes each (channel, position) over N
    alone: they have shape ``(C, *spatial)``, laid out like the input without its N.

    Tensors are passed as stored: ``channels_last`` holds the input as ``(N, *spatial, C)``
    (NHWC, NDHWC), and a per-activation scale as ``(*spatial, C)``. Statistics are float32
    (float64 for float64 inputs); scale and bias have the input's dtype, as in PyTorch.

    ``mode="train"``: takes ``(x, weight, bias[, running_mean, running_var, momentum])`` and
    returns ``y``, then ``(mean, invstd)`` of the batch if ``save``, then, if ``running``,
    the running mean and variance after this batch: ``(1 - momentum) * old + momentum *
    batch``, the batch's variance unbiased, as ``torch.nn.BatchNorm`` updates them.
    ``momentum`` is a one-element tensor (a value per call, as MIOpen's expAvgFactor, so a
    cumulative average costs no kernel per step).
    ``mode="infer"``: takes ``(x, weight, bias[, running_mean, running_var])`` and returns
    ``y``, normalized with the running statistics if ``running``, else with the batch's.
    ``mode="bwd"``: takes ``(x, dy, weight[, mean, invstd])`` and returns ``(dx, dweight,
    dbias)`` of a training forward, from the saved statistics if ``save``, else recomputed
    from ``x``. A forward may end in an ``activation`` (``relu``) applied to y; a backward
    with one takes that forward's output ``y`` last and starts with the activation's gradient
    (``dy`` where ``y > 0``, else 0: ``aten.threshold_backward``). A forward with ``residual``
    takes one more tensor like x (stored layout), after the running statistics, and adds it
    to the normalized value before the activation: ``y = relu(BN(x) + r)``, a residual
    block's sum, which then needs no kernel of its own (nor does the ReLU after it). A
    backward with ``residual`` is that forward's: it takes y's gradient as two tensors it
    adds, ``dy`` and ``dy2`` last (a residual block's output feeds the next block twice, so
    its gradient arrives as a sum), and returns after dbias the gradient of the sum
    ``BN(x) + r`` (the ReLU's gradient applied where there is one): r's gradient, which the
    block's other branch takes.

    ``running_dtype`` is the dtype of the running statistics, read and written (None: the
    stats dtype). A model moved to bf16 keeps its buffers in bf16; a kernel that takes them
    as they are saves the conversions around every call. They are computed in the stats dtype.
    """

    op_name: ClassVar[str] = "bnorm"

    input_shape: tuple[int, ...]
    mode: str = "train"
    spatial: bool = True
    channels_last: bool = False
    save: bool = False
    running: bool = False
    eps: float = 1e-5
    dtype: torch.dtype = torch.float32
    activation: str | None = None
    running_dtype: torch.dtype | None = None
    residual: bool = False

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        set_("input_shape", tuple(int(d) for d in self.input_shape))
        for name in ("spatial", "channels_last", "save", "running", "residual"):
            set_(name, bool(getattr(self, name)))
        if self.mode == "infer":
            set_("save", False)  # inference saves no statistics: one signature, one name
        set_("eps", float(self.eps))
        if not self.running or self.running_dtype == self.stats_dtype:
            set_("running_dtype", None)  # one signature, one name
        if len(self.input_shape) < 2 or min(self.input_shape) < 1:
            raise ValueError(f"input_shape {self.input_shape} must be (N, C, *spatial) with every size positive")
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} must be one of {', '.join(MODES)}")
        if self.channels_last and len(self.input_shape) not in (4, 5):
            raise ValueError(f"channels_last needs a 4-D or 5-D input, got {len(self.input_shape)}-D")
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"eps {self.eps} must be finite and not negative")
        if self.dtype not in FLOAT_DTYPES:
            raise UnsupportedError(f"bnorm dtype {self.dtype} is not supported; use float32, float16 or bfloat16")
        if self.running_dtype is not None and self.running_dtype not in FLOAT_DTYPES:
            raise UnsupportedError(f"bnorm running_dtype {self.running_dtype} is not supported; use float32, "
                                   "float16 or bfloat16")
        require_representable(self, stats_dtype(self.dtype), "eps")
        if self.mode == "train" and not self.spatial and self.input_shape[0] < 2 and self.running:
            raise ValueError("a per-activation running variance needs at least 2 samples (N >= 2)")
        if self.mode == "bwd" and self.running:
            raise ValueError("a backward kernel takes no running statistics")
        if self.activation not in (None, *ACTIVATIONS):
            raise UnsupportedError(f"bnorm activation {self.activation!r}: a forward may end in "
                                   f"{', '.join(ACTIVATIONS)} (or none), a backward start with its gradient")

    # -- geometry -------------------------------------------------------------------------------

    @property
    def channels(self) -> int:
        return self.input_shape[1]

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        return self.input_shape[2:]

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """The input as stored: ``(N, *spatial, C)`` when channels-last."""
        n, c, *rest = self.input_shape
        return (n, *rest, c) if self.channels_last else self.input_shape

    @property
    def param_shape(self) -> tuple[int, ...]:
        """Scale, bias and statistics as stored: ``(C,)``, or per activation the input
        without its N, in the input's layout."""
        return (self.channels,) if self.spatial else self.stored_shape[1:]

    @property
    def reduced_dims(self) -> tuple[int, ...]:
        """The dims of the stored input that one statistic sums over."""
        if not self.spatial:
            return (0,)
        channel = len(self.input_shape) - 1 if self.channels_last else 1
        return tuple(d for d in range(len(self.input_shape)) if d != channel)

    @property
    def reduction_size(self) -> int:
        """Elements in one statistic: N, times the spatial positions if spatial."""
        return math.prod(self.stored_shape[d] for d in self.reduced_dims)

    @property
    def stats_dtype(self) -> torch.dtype:
        return stats_dtype(self.dtype)

    @property
    def running_stats_dtype(self) -> torch.dtype:
        """The dtype of the running statistics as the kernel takes and gives them."""
        return self.running_dtype or self.stats_dtype

    @property
    def layout(self) -> str:
        rank = len(self.input_shape)
        if self.channels_last:
            return "NHWC" if rank == 4 else "NDHWC"
        return {4: "NCHW", 5: "NCDHW"}.get(rank, "N" + "C" + "X" * (rank - 2))

    # -- Signature contract -----------------------------------------------------------------------

    def readable_name(self) -> str:
        parts = [f"bnorm_{self.mode}_{short_name(self.dtype)}", "x".join(map(str, self.input_shape)),
                 self.layout.lower(), "spatial" if self.spatial else "peract"]
        if self.mode != "bwd" and self.running:
            parts.append("run" + (short_name(self.running_dtype) if self.running_dtype else ""))
        if self.mode != "infer" and self.save:
            parts.append("save")
        parts.append("eps" + repr(self.eps).replace("-", "m").replace("+", "p").replace(".", "p"))
        if self.residual:
            parts.append("res")
        if self.activation:
            parts.append(self.activation)
        return "_".join(parts)

    def _param(self, name: str, dtype: torch.dtype | None = None) -> TensorSpec:
        return TensorSpec(name, self.param_shape, dtype or self.dtype)

    def input_specs(self) -> list[TensorSpec]:
        x = TensorSpec("x", self.stored_shape, self.dtype, self.layout)
        if self.mode == "bwd":
            saved = [self._param(n, self.stats_dtype) for n in ("mean", "invstd")] if self.save else []
            activated = [TensorSpec("y", self.stored_shape, self.dtype, self.layout)] if self.activation else []
            summed = [TensorSpec("dy2", self.stored_shape, self.dtype, self.layout)] if self.residual else []
            return [x, TensorSpec("dy", self.stored_shape, self.dtype, self.layout), self._param("weight"), *saved,
                    *activated, *summed]
        running = [self._param(n, self.running_stats_dtype) for n in ("running_mean", "running_var")] \
            if self.running else []
        if self.residual:
            running.append(TensorSpec("residual", self.stored_shape, self.dtype, self.layout))
        if self.mode == "train" and self.running:
            running.append(TensorSpec("momentum", (1,), self.stats_dtype))
        return [x, self._param("weight"), self._param("bias"), *running]

    def output_specs(self) -> list[TensorSpec]:
        if self.mode == "bwd":
            residual = [TensorSpec("dresidual", self.stored_shape, self.dtype, self.layout)] if self.residual else []
            return [TensorSpec("dx", self.stored_shape, self.dtype, self.layout), self._param("dweight"),
                    self._param("dbias"), *residual]
        y = TensorSpec("y", self.stored_shape, self.dtype, self.layout)
        if self.mode == "infer":
            return [y]
        saved = [self._param(n, self.stats_dtype) for n in ("mean", "invstd")] if self.save else []
        running = [self._param(n, self.running_stats_dtype) for n in ("running_mean", "running_var")] \
            if self.running else []
        return [y, *saved, *running]

    def reference(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if self.mode == "bwd":
            return self._backward(*args)
        return self._forward(*args)

    def eager(self, *args: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """PyTorch's own batch-norm kernels (cuDNN or native) in the signature's dtype, on
        the logical NC... tensors (channels-last memory where the signature's is), then
        ``torch.relu`` where the signature has it: the benchmarks' baseline. Per-activation
        signatures, which PyTorch has no kernel for, run the reference."""
        if not self.spatial:
            return self.reference(*args)
        if self.mode == "bwd":
            x, dy = (self._logical(t) for t in args[:2])
            weight, *saved = args[2:]
            if self.residual:
                *saved, dy2 = saved
                dy = dy + self._logical(dy2)
            if self.activation:
                *saved, y = saved
                dy = torch.ops.aten.threshold_backward(dy, self._logical(y), 0)
            mean, invstd = saved if saved else self._batch_stats(args[0])
            if x.device.type == "cpu" and weight.dtype != mean.dtype:
                # ATen's CPU kernel takes 16-bit tensors with float32 statistics only with a
                # float32 weight too (its mixed-type path), and returns dw and db in float32
                weight = weight.to(mean.dtype)
            dx, dw, db = torch.ops.aten.native_batch_norm_backward(
                dy, x, weight, None, None, mean, invstd, True, self.eps, [True, True, True])
            dw, db = (t.to(args[2].dtype) for t in (dw, db))
            return (self._stored(dx), dw, db, *((self._stored(dy),) if self.residual else ()))
        x = self._logical(args[0])
        weight, bias, running, residual, momentum = self._forward_args(args[1:])
        running_mean, running_var = (t.clone() for t in running) if running else (None, None)
        training = self.mode == "train" or not self.running
        statistics = running_mean.dtype if running_mean is not None else torch.float32
        if x.device.type == "cpu" and x.dtype.itemsize == 2 and weight is not None and weight.dtype != statistics:
            # ATen's CPU mixed-type kernel for 16-bit data: the parameters in the statistics'
            # dtype, which it also saves them in (16-bit parameters: 16-bit statistics)
            weight, bias = (None if t is None else t.to(statistics) for t in (weight, bias))
        y, mean, invstd = torch.ops.aten.native_batch_norm(x, weight, bias, running_mean, running_var, training,
                                                           0.1 if momentum is None else float(momentum), self.eps)
        if residual is not None:
            y = y + self._logical(residual)
        if self.activation:
            y = ACTIVATIONS[self.activation](y)
        if self.mode == "infer":
            return self._stored(y)
        outputs = [self._stored(y)] + ([mean, invstd] if self.save else [])
        return tuple(outputs + ([running_mean, running_var] if self.running else []))

    # -- the computation ----------------------------------------------------------------------------

    def _logical(self, t: torch.Tensor) -> torch.Tensor:
        """A stored input as the (N, C, *spatial) tensor it is (a view)."""
        if not self.channels_last:
            return t
        rank = t.dim()
        return t.permute(0, rank - 1, *range(1, rank - 1))

    def _stored(self, t: torch.Tensor) -> torch.Tensor:
        """A logical (N, C, *spatial) result in the signature's stored layout."""
        if not self.channels_last:
            return t.contiguous()
        return t.permute(0, *range(2, t.dim()), 1).contiguous()

    def _batch_stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, invstd) of a stored input, in the stats dtype, shaped like the parameters."""
        mean, var = self._mean_var(x, None)
        return mean.reshape(self.param_shape), torch.rsqrt(var + self.eps).reshape(self.param_shape)

    def _broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """A parameter-shaped tensor shaped to broadcast against the stored input."""
        shape = [1] * len(self.input_shape)
        if self.spatial:
            channel = len(self.input_shape) - 1 if self.channels_last else 1
            shape[channel] = self.channels
        else:
            shape[1:] = self.param_shape
        return t.reshape(shape)

    def _sums(self, terms: Sequence[Callable[..., torch.Tensor]], *tensors: torch.Tensor,
              groups: int | None) -> tuple[torch.Tensor, ...]:
        """Each of ``terms(*tensors)`` summed over the reduced dims, keeping them. ``tensors``
        are stored inputs (full size) or parameter-sized tensors with the reduced dims kept;
        each term is elementwise (conversions, centring, products).

        ``groups``: the same sums in an order a GPU spreads over a thread per output (see
        :meth:`_partial_sums`), each term's last stage its own reduction, so that what is
        computed from that sum alone (a rounding to the output's dtype) fuses into it."""
        if groups is None:
            return tuple(term(*tensors).sum(self.reduced_dims, keepdim=True) for term in terms)
        kept = [1 if d in self.reduced_dims else size for d, size in enumerate(self.stored_shape)]
        partials = self._partial_sums(terms, *tensors, groups=groups)
        return tuple(partials[:, i].sum(0).reshape(kept) for i in range(len(terms)))

    def _partial_sums(self, terms: Sequence[Callable[..., torch.Tensor]], *tensors: torch.Tensor,
                      groups: int) -> torch.Tensor:
        """Partial sums ``(rows, terms, columns)``, at most ``groups`` rows, of every term at
        once. The terms become one more dim (chosen per term by ``triu``/``tril``, whose
        position tests the compiler generates in the kernel: no constant), stored outside the
        columns (a warp's threads then read consecutive columns, not the same column for each
        term: up to 20% faster on an H100), and the rows of the (rows, terms × columns) view are
        summed ``groups`` at a time per stage, an NCHW input's spatial rows (contiguous) first.
        The terms are applied to views already shaped for the first stage, so the compiler
        fuses them into that reduction instead of writing their float32 values out first; one
        read of the inputs serves every sum."""
        def stacked(*views: torch.Tensor) -> torch.Tensor:
            # every tensor broadcast to a trailing (1, k) matrix first, so each term is computed
            # where it is used (a value read twice would stop the fusion); term i keeps column i
            # (triu from column i, tril up to it)
            k = len(terms)
            wide = [v.unsqueeze(-1).unsqueeze(-1).expand(*v.shape, 1, k) for v in views]
            out = sum(torch.tril(torch.triu(term(*wide), i), i) for i, term in enumerate(terms))
            return out.squeeze(-2)

        n_columns = math.prod(self.param_shape) * len(terms)
        if self.spatial and not self.channels_last and len(self.input_shape) > 2:
            spatial_dims = tuple(range(2, len(self.input_shape)))
            columns = stacked(*tensors).sum(spatial_dims).transpose(-1, -2).reshape(-1, n_columns)
        else:
            parts = self.first_stage_parts(groups)
            per_row = math.prod(self.param_shape)
            views = [t.reshape(parts, self.reduction_size // parts, per_row) if t.numel() > per_row else
                     t.reshape(1, 1, per_row) for t in tensors]
            columns = stacked(*views).transpose(-1, -2).sum(1).reshape(-1, n_columns)
        while columns.shape[0] > groups:
            n_rows = columns.shape[0]
            group = _stage_group(n_rows, groups)
            parts = -(-n_rows // group)
            padded = torch.nn.functional.pad(columns, (0, 0, 0, parts * group - n_rows))
            columns = padded.reshape(parts, group, n_columns).sum(1)
        return columns.reshape(columns.shape[0], len(terms), -1)

    def first_stage_parts(self, groups: int) -> int:
        """Partial sums per column after the first stage of staged sums of ``groups`` rows
        (with channels last or per activation): each sums a divisor of the reduction near
        ``groups``, so the input is never padded."""
        return self.reduction_size // math.gcd(self.reduction_size, groups)

    def _first_element(self, x: torch.Tensor) -> torch.Tensor:
        """x at index 0 of every reduced dim: a parameter-sized tensor, reduced dims kept."""
        return x[tuple(slice(0, 1) if d in self.reduced_dims else slice(None) for d in range(x.dim()))]

    def _mean_var(self, x: torch.Tensor, groups: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's mean and biased variance (kept dims, accumulation dtype) of a stored input.

        Without ``groups``, in two passes (the mean, then the centred squares). With them (the
        GPU's staged sums), in one: the sums of ``x - s`` and ``(x - s)**2`` with ``s`` each
        statistic's first element, a shift that keeps the subtraction ``S2 - S1**2 / n`` from
        cancelling the way the plain sum of squares does when the mean is large against the spread."""
        n = self.reduction_size
        acc = _accumulation_dtype(self, x)
        if groups is None:
            mean = self._sums([lambda a: a.to(acc)], x, groups=None)[0] / n
            var = self._sums([lambda a, m: (a.to(acc) - m).square()], x, mean, groups=None)[0] / n
            return mean, var
        shift = self._first_element(x).to(acc)
        s1, s2 = self._sums([lambda a, s: a.to(acc) - s, lambda a, s: (a.to(acc) - s).square()], x, shift,
                            groups=groups)
        mean = s1 / n
        return shift + mean, (s2 / n - mean.square()).clamp_min(0)

    def _map(self, term: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> torch.Tensor:
        """``term(*tensors)`` elementwise, in the stored layout: ``tensors`` are stored inputs
        (full size) or parameter-sized tensors, broadcast here."""
        n_columns = math.prod(self.param_shape)
        return term(*(t if t.numel() > n_columns else self._broadcast(t) for t in tensors))

    def _forward_args(self, args: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor],
                                                                    torch.Tensor | None, torch.Tensor | None]:
        """A forward's arguments after x: (weight, bias, [running mean, running variance] or
        [], the residual or None, the momentum or None)."""
        weight, bias, *rest = args
        running = list(rest[:2]) if self.running else []
        rest = rest[len(running):]
        residual = rest.pop(0) if self.residual else None
        momentum = rest.pop(0) if self.mode == "train" and self.running else None
        return weight, bias, running, residual, momentum

    def _forward(self, x: torch.Tensor, *args: torch.Tensor, groups: int | None = None,
                 own_scale: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The forward; ``groups``: the batch's sums in stages of that many rows;
        ``own_scale``: each channel's scale ``invstd * weight`` in a dispatch of its own
        (:func:`_in_own_dispatch`)."""
        weight, bias, running, residual, momentum = self._forward_args(args)
        acc = _accumulation_dtype(self, x)
        use_running = self.mode == "infer" and self.running
        if use_running:
            mean = running[0].to(acc)
            invstd = torch.rsqrt(running[1].to(acc) + self.eps)
        else:
            b_mean, var = self._mean_var(x, groups)
            mean = b_mean.reshape(self.param_shape)
            invstd = torch.rsqrt(var + self.eps).reshape(self.param_shape)
        activation = ACTIVATIONS[self.activation] if self.activation else (lambda t: t)
        scale = invstd * weight.to(acc)
        if own_scale:
            scale = _in_own_dispatch(scale)
        if residual is None:
            y = self._map(lambda a, m, s, b: activation((a.to(acc) - m) * s + b).to(x.dtype),
                          x, mean, scale, bias.to(acc))
        else:
            y = self._map(lambda a, m, s, b, r: activation((a.to(acc) - m) * s + b + r.to(acc)).to(x.dtype),
                          x, mean, scale, bias.to(acc), residual)
        if self.mode == "infer":
            return y
        # On GPUs (staged sums) the saved statistics are returned as values of their own (+ 0.0,
        # which IREE does not fold away; it only turns a -0.0 mean into +0.0): a value both
        # returned and read by the pass that writes y is kept in IREE's transient buffer and
        # copied out after, two copies per call (docs/gpu.md).
        saved = [mean, invstd] if groups is None else [mean + 0.0, invstd + 0.0]
        outputs = [y] + (saved if self.save else [])
        if self.running:
            n = self.reduction_size
            unbiased = var.reshape(self.param_shape) * (n / max(n - 1, 1))
            m = momentum.to(acc)
            # (1 - m) * old + m * new, written so that no scalar 1 - m is computed on its own
            updated = [running[0].to(acc) + m * (mean - running[0].to(acc)),
                       running[1].to(acc) + m * (unbiased - running[1].to(acc))]
            if self.running_dtype is not None and acc != torch.float64:
                updated = [t.to(self.running_dtype) for t in updated]
            outputs += updated
        # statistics in the accumulation dtype (the stats dtype, or float64), running ones
        # in running_dtype where there is one
        return tuple(outputs)

    def _backward(self, x: torch.Tensor, dy: torch.Tensor, weight: torch.Tensor, *saved: torch.Tensor,
                  groups: int | None = None) -> tuple[torch.Tensor, ...]:
        acc = _accumulation_dtype(self, x)
        given = []  # what y's gradient is made of besides dy: dy2 (summed), y (the ReLU's output)
        if self.residual:
            *saved, dy2 = saved
            given.append(dy2)
        if self.activation:
            *saved, y = saved
            given.append(y)
        if saved:
            mean, invstd = (self._broadcast(t.to(acc)) for t in saved)
        else:
            mean, var = self._mean_var(x, groups)
            invstd = torch.rsqrt(var + self.eps)
        n = self.reduction_size

        def dx(a: torch.Tensor, g: torch.Tensor, m: torch.Tensor, i: torch.Tensor, w: torch.Tensor,
               db: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
            return ((w * i / n) * (n * g.to(acc) - db - ((a.to(acc) - m) * i) * dw)).to(x.dtype)

        terms = [lambda g, a, m, i: g.to(acc), lambda g, a, m, i: g.to(acc) * ((a.to(acc) - m) * i)]
        if groups is None or not given:
            g = self._output_gradient(dy, *given)
            dbias, dweight = self._sums(terms, g, x, mean, invstd, groups=groups)
            dx_value = self._map(dx, x, g, mean, invstd, weight.to(acc), dbias, dweight)
            summed = (g.to(x.dtype),) if self.residual else ()
        else:
            # On GPUs y's gradient is computed where it is read, in the sums' first stage and again
            # in the pass writing dx (and dresidual, as that pass's second output), each spelled
            # differently so that the compiler does not merge the two into one value: one value
            # read by both passes is written to a transient buffer first, and one that is also
            # returned is copied out after (docs/gpu.md).
            k = len(given)
            dbias, dweight = self._sums(
                [lambda d, *r, term=term: term(self._output_gradient(d, *r[:k], spelling=1), *r[k:])
                 for term in terms], dy, *given, x, mean, invstd, groups=groups)
            dx_value = self._map(lambda a, d, *r: dx(a, self._output_gradient(d, *r[:k]), *r[k:]),
                                 x, dy, *given, mean, invstd, weight.to(acc), dbias, dweight)
            summed = (self._output_gradient(dy, *given).to(x.dtype),) if self.residual else ()
        return (dx_value, dweight.reshape(self.param_shape).to(x.dtype), dbias.reshape(self.param_shape).to(x.dtype),
                *summed)

    def _output_gradient(self, dy: torch.Tensor, *given: torch.Tensor, spelling: int = 0) -> torch.Tensor:
        """The gradient of the normalized value from y's: ``dy (+ dy2)``, then the ReLU's
        gradient (0 where its output ``y <= 0``, as ``aten.threshold_backward``). ``spelling``
        1 computes the same value written another way (operands swapped, the test negated;
        only a NaN y differs), which a compiler does not merge with spelling 0."""
        rest = list(given)
        if self.residual:
            dy2 = rest.pop(0)
            dy = dy2 + dy if spelling else dy + dy2
        if self.activation:
            y = rest.pop(0)
            dy = torch.where(y > 0, dy, 0.0) if spelling else torch.where(y <= 0, 0.0, dy)
        return dy

    def get_sample_args(self, *, device: str | torch.device = "cpu", seed: int | None = None,
                        splat_value: float | None = None) -> tuple[torch.Tensor, ...]:
        """Random inputs; running variances are positive, saved statistics are x's own."""
        args = list(super().get_sample_args(device=device, seed=seed, splat_value=splat_value))
        if splat_value is not None:
            return tuple(args)
        if self.mode != "bwd" and self.running:
            args[4] = args[4].abs() + 0.5
        if self.mode == "train" and self.running:  # an update factor in [0, 1), the last input
            args[-1] = (args[-1].abs() / (1 + args[-1].abs())).to(self.stats_dtype)
        if self.mode == "bwd" and self.save:
            mean, invstd = self._batch_stats(args[0].to(torch.float64))
            args[3], args[4] = mean.to(self.stats_dtype), invstd.to(self.stats_dtype)
        return tuple(args)

    # -- cost model -------------------------------------------------------------------------------

    @property
    def flops(self) -> int:
        """Per element: training forward 7 (two sums, subtract, square, scale, shift, and the
        normalization), inference 2 (a fused scale and shift), backward 8; a residual's sum 1 more."""
        per_element = {"train": 7, "infer": 2 if self.running else 7, "bwd": 8}[self.mode] + self.residual
        return per_element * math.prod(self.input_shape)

    @property
    def accumulation_length(self) -> int:
        """Terms summed into one statistic or parameter gradient."""
        return 1 if self.mode == "infer" and self.running else self.reduction_size

    def error_scales(self, args: Sequence[torch.Tensor]) -> Mapping[str, float]:
        """A mean's error scales with the mean of |x| (values of both signs can average to
        nearly 0), not with the mean itself; so do the running mean's and dbias's. A float32
        kernel that sums over the batch (the statistics from x, or a backward's sums of dy and
        dy x̂) may err up to a few times what the same computation in float32 errs on these
        inputs, where that exceeds the usual allowance: with few samples per statistic (a
        per-activation batch of 2, say) two values can nearly agree, or a backward's
        ``n dy - sum(dy) - x̂ sum(dy x̂)`` nearly cancel, and float32 loses digits there in
        every implementation."""
        if not args or not args[0].numel():
            return {}
        scale = args[0].detach().to(torch.float64).abs().mean().item()
        if self.mode == "bwd":
            summed = args[1].detach().to(torch.float64).abs().sum(self.reduced_dims).max().item()
            scales = {"dbias": summed, "dweight": summed}
        else:
            scales = {"mean": scale, "running_mean": scale}
        if self.mode == "infer" and self.running:
            return scales  # the statistics are inputs, and nothing is summed
        if self.dtype != torch.float32:
            return scales  # the float32 statistics' error is under the output's own rounding
        # The same computation in float32 (the reference, as PyTorch's kernels would): an
        # error it makes too is the data's conditioning, not the kernel's.
        inputs = [a.detach() for a in args]
        with torch.no_grad():
            in_float32 = self.reference(*inputs)
            in_float64 = self.reference(*(a.double() if a.dtype.is_floating_point else a for a in inputs))
        in_float32 = (in_float32,) if isinstance(in_float32, torch.Tensor) else in_float32
        in_float64 = (in_float64,) if isinstance(in_float64, torch.Tensor) else in_float64
        for spec, mine, exact in zip(self.output_specs(), in_float32, in_float64, strict=True):
            error = (mine.double() - exact).abs().max().item() if mine.numel() else 0.0
            per_scale = tolerance_for(spec.dtype, torch.zeros(0), self.accumulation_length, scale=1.0).atol
            scales[spec.name] = max(scales.get(spec.name, 0.0), _FLOAT32_SLACK * error / per_scale)
        return scales
