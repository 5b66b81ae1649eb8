"""Strided data gradients by phase: which it serves, how IREE's module for them is
replaced, and PTX.

A served data gradient (:func:`problem_of`): a conv ``bwd`` signature as :mod:`.conv` takes
(bf16, 2-D, channels-last, one group, undilated, no epilogue), strides of 1 and 2 with a 2
among them, dX's extents multiples of them, padding within the window, and multiples of 64
channels in dY and dX. The pixels of dX at ``(SH*i + a, SW*j + b)`` form phase ``(a, b)``,
which reads the filter's taps ``((a + PAD_H) mod SH + SH*u, ...)`` only: a 3x3/2 data
gradient's phases read 4, 2, 2 and 1 taps, a 1x1/2's one tap and none.
``boo_hopper_dgrad_phases`` computes each phase as an implicit GEMM over dY as stored (its
padding applied by masked loads) and the taps the phase reads: the zero-inserted dY the
``default`` module convolves (four times the multiply-adds at stride 2) and its zeroed
transient are never made.

It replaces the executables of the conv op's ``phase_axes`` module (boo_ops_conv
``linalg_formulations``), which on CUDA are (cross-compiled with ``boo dump``): the filter
gathered by phase into a transient, then one contraction binding dY as stored, the gathered
filter and dX. The gather becomes a copy of the filter as stored into the transient (any
further executables moving it, copies slot to slot), and the contraction the phases'
kernel reading the filter from the last slot. :func:`plan` matches what it finds (sizes,
offsets, the chain of slots) and raises ValueError on anything else (BOO then passes the
substitution over). Everything here but :func:`generate` runs without Triton or a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import conv
from .ptx import Kernel, compile_for_iree
from .wgrad import COPY_ORDER, Launch, Span, check_bindings, copy_launch, spans

FORMULATION = "phase_axes"  # the conv op's module whose executables plan() knows
PHASES_ORDER = ["dy", "w", "dx", "DY_OFF", "W_OFF", "DX_OFF", "N", "P", "Q", "K", "C", "H", "W", "R", "S", "SH", "SW",
                "PAD_H", "PAD_W", "ORDER", "BM", "BN", "BK", "GROUP"]


@dataclass(frozen=True)
class PhaseProblem:
    """dY (n, p, q, k) -> dX (n, h, w, c) through the filter (k, r, s, c) of a convolution at
    stride (sh, sw) with padding (ph, pw)."""

    n: int
    p: int
    q: int
    k: int
    h: int
    w: int
    c: int
    r: int
    s: int
    sh: int
    sw: int
    ph: int
    pw: int

    def taps(self, a: int, b: int) -> int:
        """The filter taps phase (a, b) reads."""
        return (-(-(self.r - (a + self.ph) % self.sh) // self.sh)
                * -(-(self.s - (b + self.pw) % self.sw) // self.sw))

    @property
    def phase_order(self) -> list[tuple[int, int]]:
        """The phases, the most taps first (their programs run first: the last wave is the
        lightest)."""
        every = [(a, b) for a in range(self.sh) for b in range(self.sw)]
        return sorted(every, key=lambda phase: -self.taps(*phase))

    @property
    def pixels_per_phase(self) -> int:
        return self.n * (self.h // self.sh) * (self.w // self.sw)

    @property
    def dy_numel(self) -> int:
        return self.n * self.p * self.q * self.k

    @property
    def weight_numel(self) -> int:
        return self.k * self.r * self.s * self.c

    @property
    def dx_numel(self) -> int:
        return self.n * self.h * self.w * self.c


def problem_of(signature: Any) -> PhaseProblem | None:
    """The problem for a BOO ``conv`` signature this module serves (module docstring), else None."""
    s = signature
    found = conv.plain_geometry(s) if getattr(s, "mode", None) == "bwd" else None
    if found is None or s.bias or s.activation:
        return None
    n, c, h, w, k, r, t, p, q, sh, sw, ph, pw = found
    if not ({sh, sw} <= {1, 2} and 2 in (sh, sw)) or h % sh or w % sw or ph >= r or pw >= t or k % 64 or c % 64:
        return None
    return PhaseProblem(n, p, q, k, h, w, c, r, t, sh, sw, ph, pw)


#: Tiles by phase (H200, bf16, batch 32, µs of the module, examples/boo_kernels_hopper/bench_dgrad.py):
#: where 128 pixels tile each phase's exactly (56x56 and 28x28 dX), 128x128 tiles with 3
#: stages (3x3/2 128 @56 30.3 with 4 stages -> 23.0, 256 @28 23.9 -> 20.0; 1x1/2 256->512 @56
#: 42.4 -> 30.1, 512->1024 @28 26.1 -> 20.5); where they do not (a 14x14 dX: 1568 pixels a
#: phase), 64x128 tiles (3x3/2 512 @14 23.7 -> 21.3, 1x1/2 1024->2048 @14 24.4 -> 22.1).
WHOLE_TILES = conv.ConvConfig(128, 128, 64, 8, 8, 3)
PARTIAL_TILES = conv.ConvConfig(64, 128, 64, 8, 4, 4)
NARROW_TILES = conv.ConvConfig(128, 64, 64, 8, 4, 4)  # dX of 64-channel multiples, not of 128


def choose_config(problem: PhaseProblem) -> conv.ConvConfig:
    """The tiles for ``problem`` (:data:`WHOLE_TILES`)."""
    if problem.c % 128:
        return NARROW_TILES
    return PARTIAL_TILES if problem.pixels_per_phase % WHOLE_TILES.bm else WHOLE_TILES


def plan(problem: PhaseProblem, executables: tuple[Any, ...], config: conv.ConvConfig | None = None
         ) -> list[Launch]:
    """What replaces each executable of the ``phase_axes`` module (module docstring):
    copies of the filter along the chain of its slots, then the phases' kernel. ValueError
    for any other module."""
    pb = problem
    names = [e.name for e in executables]
    if len(executables) < 2:
        raise ValueError(f"{len(executables)} executables {names}: not the phase_axes module")
    *movers, contraction = executables
    found = spans(contraction)
    check_bindings(contraction, found)
    if [sp.binding for sp in found] != [0, 1, 2] or any(sp.dtype != "bf16" for sp in found):
        raise ValueError(f"{contraction.name}: tensors {found}, expected dY, the filter, dX at bindings 0, 1, 2")
    dy, filt, dx = found
    if (dy.numel, dy.access, dx.numel, dx.access == "readonly") != (pb.dy_numel, "readonly", pb.dx_numel, False):
        raise ValueError(f"{contraction.name}: dY {dy.shape} {dy.access}, dX {dx.shape} {dx.access}, expected "
                         f"{pb.dy_numel} and {pb.dx_numel} elements")
    if filt.access != "readonly" or filt.numel < pb.weight_numel:
        raise ValueError(f"{contraction.name}: the rearranged filter {filt.shape} holds less than the filter")
    launches, source = [], None
    for mover in movers:
        moved = spans(mover)
        check_bindings(mover, moved)
        if len(moved) != 2 or moved[0].access != "readonly" or moved[1].access == "readonly":
            raise ValueError(f"{mover.name}: tensors {moved}, expected one read and one written")
        read, written = moved
        if source is None and (read.numel != pb.weight_numel or read.offset):
            raise ValueError(f"{mover.name}: reads {read.shape} at byte {read.offset}, not the filter")
        if source is not None and read.offset != source.offset:
            raise ValueError(f"{names}: a filter slot written at byte {source.offset} and read at {read.offset}")
        if written.numel < pb.weight_numel:
            raise ValueError(f"{mover.name}: writes {written.shape}, smaller than the filter")
        launches.append(copy_launch(mover, read, written, 0, pb.weight_numel))
        source = written
    if source is None or source.offset != filt.offset:
        raise ValueError(f"{names}: the filter's last slot is at byte {source and source.offset}, "
                         f"the contraction reads it at {filt.offset}")
    launches.append(_phases_launch(pb, config or choose_config(pb), contraction, dy, filt, dx))
    return launches


def _phases_launch(pb: PhaseProblem, config: conv.ConvConfig, executable: Any, dy: Span, filt: Span, dx: Span
                   ) -> Launch:
    order = sum((a * pb.sw + b) << (4 * slot) for slot, (a, b) in enumerate(pb.phase_order))
    constants = {"DY_OFF": dy.element_offset, "W_OFF": filt.element_offset, "DX_OFF": dx.element_offset,
                 "N": pb.n, "P": pb.p, "Q": pb.q, "K": pb.k, "C": pb.c, "H": pb.h, "W": pb.w, "R": pb.r, "S": pb.s,
                 "SH": pb.sh, "SW": pb.sw, "PAD_H": pb.ph, "PAD_W": pb.pw, "ORDER": order, "BM": config.bm,
                 "BN": config.bn, "BK": config.bk, "GROUP": config.group}
    grid = pb.sh * pb.sw * -(-pb.pixels_per_phase // config.bm) * (pb.c // config.bn)
    return Launch(executable, "phases", ("dy", "w", "dx"), constants, grid, config.num_warps, config.num_stages)


def multiply_adds(problem: PhaseProblem) -> int:
    """The multiply-adds the phases' kernel makes (no inserted zeros)."""
    return sum(problem.taps(a, b) for a, b in problem.phase_order) * problem.pixels_per_phase * problem.k \
        * problem.c


def generate(launch: Launch, entry: str) -> Kernel:
    """Compile the kernel of one replaced executable to sm_90a PTX named ``entry``."""
    from ._triton_conv import boo_hopper_copy, boo_hopper_dgrad_phases

    fn, order = {"phases": (boo_hopper_dgrad_phases, PHASES_ORDER), "copy": (boo_hopper_copy, COPY_ORDER)}[
        launch.kernel]
    compiled, ptx = compile_for_iree(fn, list(launch.pointers), dict(launch.constants), order, launch.num_warps,
                                     launch.num_stages, entry, launch.types)
    return Kernel(ptx, compiled.metadata.num_warps * 32, launch.grid, int(compiled.metadata.shared))

