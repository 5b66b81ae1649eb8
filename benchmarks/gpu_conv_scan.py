"""Which convolutions does IREE's CUDA path get wrong, and which remedy is right and fast?

Runs convolutions on the GPU through BOO, each compiled several ways ("variants"), compares
every result with PyTorch in float64 (outputs poisoned first, fresh random inputs), and
times the correct ones (device time, torch.profiler). One row per convolution.

    python benchmarks/gpu_conv_scan.py --grid full      # where is IREE wrong?
    python benchmarks/gpu_conv_scan.py --grid broken    # remedies for the broken classes
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from boo_core import CompileError, get_launchable
from boo_core.settings import settings_override
from boo_core.verify.numerics import check_launchable
from boo_ops_conv import ConvSignature, layouts


@dataclasses.dataclass(frozen=True)
class RawConv(ConvSignature):
    """BOO's export as it is: the conv plugin's CUDA workarounds apply to ConvSignature only."""

    def readable_name(self) -> str:
        return super().readable_name() + "_raw"


@dataclasses.dataclass(frozen=True)
class PrepaddedConv(RawConv):
    """The same convolution with its padding done by an explicit pad (a formulation to test)."""

    def readable_name(self) -> str:
        return super().readable_name().removesuffix("_raw") + "_prepad"

    def reference(self, x, w, b=None):
        if self.mode != "fwd" or not any(self.padding):
            return super().reference(x, w, b)
        logical = layouts.permute(x, layouts.to_logical(self.input_layout))
        padded = F.pad(logical, [p for pad in reversed(self.padding) for p in (pad, pad)])
        unpadded = ConvSignature(tuple(padded.shape), self.kernel_shape, stride=self.stride, dilation=self.dilation,
                                 groups=self.groups, dtype=self.dtype, input_layout="NCHW",
                                 kernel_layout=self.kernel_layout, output_layout=self.output_layout, bias=self.bias)
        return unpadded.reference(padded, w, b)


#: name -> (formulation, extra iree-compile flags)
VARIANTS = {
    "default": (RawConv, ()),
    "boo": (ConvSignature, ()),  # with the conv plugin's workarounds (float32 compute where IREE is wrong)
    "prepad": (PrepaddedConv, ()),
    "prepad_nofuse": (PrepaddedConv, ("--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops=false",
                                      "--iree-dispatch-creation-enable-fuse-padding-into-linalg-producer-ops=false")),
    "igemm_off": (RawConv, ("--iree-codegen-llvmgpu-use-igemm=false",)),
    "igemm_pad": (RawConv, ("--iree-codegen-llvmgpu-igemm-pad-convolution",)),
    "direct": (RawConv, ("--iree-codegen-llvmgpu-use-direct-convolution",)),
    "im2col": (RawConv, ("--iree-global-opt-use-im2col-for-convs",)),
    "no_transpose_prop": (RawConv, ("--iree-global-opt-propagate-transposes=false",)),
}


def full_grid() -> list[ConvSignature]:
    cases = []
    for dtype, layout, window, padding, stride in itertools.product(
            (torch.bfloat16, torch.float16, torch.float32), ("NHWC", "NCHW"), (1, 3, 5), (0, 1, 2), (1, 2)):
        if window == 1 and padding:
            continue
        cases.append(ConvSignature((4, 64, 14, 14), (64, 64, window, window), stride=stride, padding=padding,
                                   dtype=dtype, shared_layout=layout))
    return cases


def broken_grid() -> list[ConvSignature]:
    """The classes the full grid found wrong (16-bit NHWC padded, 16-bit NCHW 1x1), at two sizes."""
    cases = []
    for dtype, (n, c, hw) in itertools.product((torch.bfloat16, torch.float16), ((4, 64, 14), (32, 64, 56))):
        for window, padding, stride in ((3, 1, 1), (3, 1, 2), (5, 2, 1)):
            cases.append(ConvSignature((n, c, hw, hw), (c, c, window, window), stride=stride, padding=padding,
                                       dtype=dtype, shared_layout="NHWC"))
        for stride in (1, 2):
            cases.append(ConvSignature((n, c, hw, hw), (4 * c, c, 1, 1), stride=stride, dtype=dtype,
                                       shared_layout="NCHW"))
    return cases


def device_us(launchable, args, calls: int = 10) -> float:
    launchable(*args)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(calls):
            launchable(*args)
    return sum(e.device_time_total for e in profile.key_averages()) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--grid", choices=("full", "broken"), default="full")
    parser.add_argument("--variants", default=None, help="comma-separated names of VARIANTS (default: "
                                                         "default,boo,igemm_off)")
    args = parser.parse_args()
    signatures = full_grid() if args.grid == "full" else broken_grid()
    names = (args.variants or "default,boo,igemm_off").split(",")
    jobs = []
    for signature in signatures:
        for name in names:
            formulation, flags = VARIANTS[name]
            fields = {f.name: getattr(signature, f.name) for f in dataclasses.fields(signature)}
            jobs.append((signature, name, formulation(**fields), flags))

    def build(job):
        _, _, formulated, flags = job
        with settings_override(extra_compile_flags=flags):
            try:
                return get_launchable(formulated, args.device)
            except CompileError as e:  # some variants hit compiler bugs: a finding, not a stop
                return next((line.strip() for line in str(e).splitlines() if "error:" in line), "compile error")

    start = time.time()
    with ThreadPoolExecutor(16) as pool:
        launchables = list(pool.map(build, jobs))
    print(f"compiled {len(jobs)} kernels in {time.time() - start:.0f} s")
    cells = {}
    for (signature, name, formulated, _), launchable in zip(jobs, launchables):
        if isinstance(launchable, str):
            cells[(signature, name)] = "no compile"
            continue
        [result] = check_launchable(launchable)
        if not result.passed:
            cells[(signature, name)] = f"WRONG {result.max_rel_error:.0e}"
        elif args.grid == "broken" or name == "boo":
            inputs = formulated.get_sample_args(device=args.device)
            cells[(signature, name)] = f"ok {device_us(launchable, inputs):.0f}us"
        else:
            cells[(signature, name)] = f"ok {result.max_rel_error:.0e}"
    print(f"{'convolution':<56} " + " ".join(f"{n:>14}" for n in names))
    for signature in signatures:
        print(f"{signature.func_name[:56]:<56} " + " ".join(f"{cells[(signature, n)]:>14}" for n in names))


if __name__ == "__main__":
    main()
