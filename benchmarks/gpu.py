"""BOO on an NVIDIA GPU against PyTorch (cuDNN / cuBLAS) and Inductor, measured in one run.

Rows: ResNet-50's convolutions (bf16, NHWC, batch 32; forward, backward-data and
backward-weight), the same forwards as inference's conv + batch norm + ReLU (BOO: one
kernel, CBAInfer's, the batch norm in the conv's epilogue, as ``torch.compile`` gives it;
torch: cuDNN's conv, then PyTorch's batch norm and ReLU), the seven whose blocks add their
identity before the ReLU (``conv+bn+add+relu``: CBAInfer with ``--residual``; torch adds
it before the ReLU), ResNet-50's batch norms,
transformer layer norms and matmuls (bf16). Each time is device time per
call: the sum of the kernels a call launches, from torch.profiler (which sees IREE's kernels
too), the median of several profiled batches. Also measured in the same run: the GPU's bf16
matmul rate and copy bandwidth (the peaks), and the host time of one launch.

``--traced`` adds a second table: the distinct kernels (forward and gradients, inference and
training) that ``torch.compile(backend="iree_boo")`` builds for torchvision's ResNet-50,
ViT-B/16, ResNeXt-50 32x4d (grouped convolutions) and ConvNeXt-T (7x7 depthwise
convolutions, channels-last layer norms) and for the GPT-style decoder block, bf16, found
by tracing the models on the device (``boo_core.dynamo.kernel_signatures``); those the
first table has are left out. Each table gets its own geometric mean.

    python benchmarks/gpu.py [--device cuda:0] [--batch 32] [--no-inductor] [--only TEXT] [--tune | --tuned]
                             [--csv tune.csv] [--verification-cost] [--traced]
    python benchmarks/gpu.py --launch    # host time per launch; model steps, eager/Inductor/BOO/+CUDA graphs
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from boo_core import BooOpRegistry, CompileError, clear_launchables, get_launchable, resolve_device
from boo_core.kernels.request import KernelRequest
from boo_core.settings import settings_override
from boo_core.signatures.signature import Signature
from boo_ops_conv import ConvBatchNormActivationSignature, ConvSignature
from boo_ops_matmul import MatmulSignature

BF16 = torch.bfloat16

# ResNet-50 v1.5 convolutions: (input channels, output channels, window, stride, input size).
RESNET50 = [
    (3, 64, 7, 2, 224),
    (64, 64, 1, 1, 56), (64, 64, 3, 1, 56), (64, 256, 1, 1, 56), (256, 64, 1, 1, 56),
    (256, 128, 1, 1, 56), (128, 128, 3, 2, 56), (128, 512, 1, 1, 28), (512, 128, 1, 1, 28),
    (128, 128, 3, 1, 28), (256, 512, 1, 2, 56),
    (512, 256, 1, 1, 28), (256, 256, 3, 2, 28), (256, 1024, 1, 1, 14), (1024, 256, 1, 1, 14),
    (256, 256, 3, 1, 14), (512, 1024, 1, 2, 28),
    (1024, 512, 1, 1, 14), (512, 512, 3, 2, 14), (512, 2048, 1, 1, 7), (2048, 512, 1, 1, 7),
    (512, 512, 3, 1, 7), (1024, 2048, 1, 2, 14),
]

# The convolutions whose batch norm a ResNet-50 block adds its identity to before the ReLU
# (torch.compile's CBAInfer with --residual): each block's last, or, in a downsampling block,
# the downsampling conv (the later of the two in the graph).
RESNET50_RESIDUAL = [(64, 256, 1, 1, 56), (128, 512, 1, 1, 28), (256, 1024, 1, 1, 14), (512, 2048, 1, 1, 7),
                     (256, 512, 1, 2, 56), (512, 1024, 1, 2, 28), (1024, 2048, 1, 2, 14)]


def resnet50_conv(row: tuple[int, int, int, int, int], mode: str, batch: int = 32) -> tuple[str, ConvSignature]:
    """A :data:`RESNET50` row in ``mode`` (bf16, NHWC): its name (``c->k RxR/stride @size
    mode``) and signature."""
    c, k, window, stride, size = row
    signature = ConvSignature((batch, c, size, size), (k, c, window, window), stride=stride, padding=window // 2,
                              dtype=BF16, shared_layout="NHWC", mode=mode)
    return f"{c}->{k} {window}x{window}/{stride} @{size} {mode}", signature


def rows(batch: int) -> list[tuple[str, Signature]]:
    out = []
    for row in RESNET50:
        for mode in ("fwd", "bwd", "wrw"):
            name, signature = resnet50_conv(row, mode, batch)
            out.append((f"resnet50 conv {name}", signature))
    for c, k, window, stride, size in RESNET50:
        signature = ConvBatchNormActivationSignature(
            batch, c, size, size, k=k, fil_h=window, fil_w=window, stride_h=stride, stride_w=stride,
            pad_h=window // 2, pad_w=window // 2, fusion="cna", bn_mode="spatial", eps=1e-5, dtype=BF16,
            layout="NHWC")
        out.append((f"resnet50 conv+bn+relu {c}->{k} {window}x{window}/{stride} @{size}", signature))
    for c, k, window, stride, size in RESNET50_RESIDUAL:
        signature = ConvBatchNormActivationSignature(
            batch, c, size, size, k=k, fil_h=window, fil_w=window, stride_h=stride, stride_w=stride,
            fusion="cna", bn_mode="spatial", eps=1e-5, dtype=BF16, layout="NHWC", residual=True)
        out.append((f"resnet50 conv+bn+add+relu {c}->{k} {window}x{window}/{stride} @{size}", signature))
    out += batch_norm_rows(batch)
    for tokens, width in ((8192, 1024), (8192, 4096), (6304, 768)):  # the last: ViT-B/16's, batch 32
        for command in (f"layernormbfp16 --input {tokens}x{width} -o 1 -m 1 -F 1",
                        f"layernormbfp16 --input {tokens}x{width} -o 1 -m 1 -F 2",
                        f"layernormbfp16 --input {tokens}x{width} -o 1 -m 1 -F 14"):
            try:
                for signature in BooOpRegistry.parse_signatures(command):
                    out.append((f"layer norm {tokens}x{width} {command.split()[-1]}", signature))
            except Exception as e:  # the layer-norm plugin may not be installed
                print(f"(skipping layer norm: {e})")
                break
    for m, n, k in ((8192, 4096, 1024), (8192, 1024, 4096), (4096, 4096, 4096)):
        out.append((f"matmul {m}x{k} @ {k}x{n}", MatmulSignature(m=m, n=n, k=k, dtype=BF16)))
    return out


def batch_norm_rows(batch: int) -> list[tuple[str, Signature]]:
    """ResNet-50's batch norms (bf16, NHWC): training forward (statistics saved, running
    statistics updated), inference with the ReLU that follows most of them, backward."""
    try:
        from boo_ops_batchnorm import BatchNormSignature
    except ImportError:  # the batch-norm plugin may not be installed
        print("(skipping batch norm: boo-ops-batchnorm is not installed)")
        return []
    shapes = sorted({(k, size // stride) for _, k, _, stride, size in RESNET50} | {(c, size) for c, _, _, _, size in
                                                                                  RESNET50[1:]})
    out = []
    for channels, size in shapes:
        common = dict(input_shape=(batch, channels, size, size), channels_last=True, dtype=BF16)
        for mode, extra in (("train", dict(save=True, running=True)), ("infer", dict(running=True, activation="relu")),
                            ("bwd", dict(save=True))):
            out.append((f"resnet50 bnorm {channels} @{size} {mode}", BatchNormSignature(mode=mode, **common, **extra)))
    return out


#: Label of the rows of the second table (--traced).
TRACED = "traced"


#: The networks of the second table (--traced): boo_core.testing.models' workloads.
TRACED_MODELS = ("resnet50", "vit_b_16", "decoder", "resnext50_32x4d", "convnext_tiny")


def traced_rows(batch: int, device: str, known: set[str]) -> list[tuple[str, Signature]]:
    """The second table: every kernel the traced networks give torch.compile, in inference
    and in training (bf16), each once, leaving out the signatures in ``known``. Grouped
    convolutions, which torch.compile leaves to cuDNN on CUDA (boo_ops_conv.fusion), are listed
    as if offloaded: they are kernels BOO has yet to make competitive."""
    from boo_core.dynamo import kernel_signatures
    from boo_core.testing.models import workload_on
    from boo_ops_conv import fusion

    out, seen = [], set(known)
    offloaded, fusion.OFFLOAD_GROUPED_ON_CUDA = fusion.OFFLOAD_GROUPED_ON_CUDA, True
    try:
        for name in TRACED_MODELS:
            model, x = workload_on(name, batch, device, BF16)
            for training in (False, True):
                for signature in kernel_signatures(model.train(training), x, backward=training):
                    if signature.func_name not in seen:
                        seen.add(signature.func_name)
                        out.append((f"{TRACED} {name} {signature.func_name}", signature))
            del model
    finally:
        fusion.OFFLOAD_GROUPED_ON_CUDA = offloaded
    return out


def torch_baseline(name: str, signature: Signature, device: str) -> Callable[..., object]:
    """What PyTorch runs for a row: the signature's eager computation, except that a channels-last
    conv + bn (+ add) (+ relu) row (BOO: one CBAInfer kernel, the batch norm and the residual in
    the conv's epilogue, as torch.compile gives it) runs cuDNN's convolution on the channels-last
    tensors, then PyTorch's inference batch norm, the add and the ReLU where the row has them."""
    s = signature
    if not (isinstance(s, ConvBatchNormActivationSignature) and s.fusion in ("cn", "cna") and s.layout == "NHWC"
            and s.bn_mode == "spatial" and s.activation == "relu"):
        return signature.eager

    def eager(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, mean: torch.Tensor,
              var: torch.Tensor, *residual: torch.Tensor) -> torch.Tensor:
        # stored NHWC: the logical NCHW views are channels-last, which cuDNN runs as such
        y = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), None,
                                       (s.stride_h, s.stride_w), s.padding, (s.dilation_h, s.dilation_w), s.groups)
        y = torch.nn.functional.batch_norm(y, mean, var, scale, shift, training=False, eps=s.eps)
        y = y + residual[0].permute(0, 3, 1, 2) if residual else y
        return torch.relu(y) if s.has_activation else y

    return eager


def device_us(fn, args, batches: int = 5, calls: int = 5) -> float:
    """Median over batches of the device time per call (all kernels, from the profiler)."""
    fn(*args)
    torch.cuda.synchronize()
    samples = []
    for _ in range(batches):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize()
        samples.append(sum(e.device_time_total for e in profile.key_averages()) / calls)
    return statistics.median(samples)


def peaks(device: str) -> tuple[float, float]:
    """(bf16 matmul TFLOP/s, copy GB/s counting bytes read and written), measured now."""
    a = torch.randn(8192, 8192, device=device, dtype=BF16)
    b = torch.randn(8192, 8192, device=device, dtype=BF16)
    matmul_us = device_us(torch.matmul, (a, b))
    source = torch.randn(256 * 1024 * 1024, device=device)  # 1 GiB
    target = torch.empty_like(source)
    copy_us = device_us(lambda s, t: t.copy_(s), (source, target))
    return 2 * 8192**3 / matmul_us / 1e6, 2 * source.numel() * 4 / copy_us / 1e3


def host_overhead_us(device: str, launch: str = "direct") -> tuple[float, float]:
    """Host time of one call of a tiny kernel: a BOO launchable (``launch``: direct on torch's
    stream, or through IREE's runtime), and the same torch op."""
    signature = MatmulSignature(m=4, n=4, k=4)
    clear_launchables()
    with settings_override(cuda_launch=launch):
        launchable = get_launchable(signature, device)
    assert launchable.launch == launch, launchable.launch
    a, b = signature.get_sample_args(device=device)

    def per_call(fn) -> float:
        for _ in range(50):
            fn(a, b)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(500):
            fn(a, b)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / 500 * 1e6

    return per_call(launchable), per_call(torch.matmul)


def resnet_block(device: str) -> torch.nn.Module:
    """ResNet-50's 64-channel bottleneck at 56x56 (bf16, channels-last)."""
    class Bottleneck(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            nn = torch.nn
            self.body = nn.Sequential(nn.Conv2d(256, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.Conv2d(64, 256, 1, bias=False), nn.BatchNorm2d(256))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + x)

    return Bottleneck().to(device, BF16, memory_format=torch.channels_last)


def transformer_mlp(device: str) -> torch.nn.Module:
    """A transformer's MLP: 1024 -> 4096 -> 1024 with GELU (bf16)."""
    nn = torch.nn
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(device, BF16)


MODELS = {"resnet block 32x256x56x56": (resnet_block, (32, 256, 56, 56)),
          "transformer MLP 4096x1024": (transformer_mlp, (4096, 1024))}
VARIANTS = {"eager": None, "inductor": ("inductor", None), "boo": ("iree_boo", None),
            "boo reduce-overhead": ("iree_boo", "reduce-overhead")}


def step_ms(model: torch.nn.Module, x: torch.Tensor, training: bool, steps: int = 20) -> float:
    """Median wall time of one step (forward, and backward when training), GPU finished."""
    samples = []
    for index in range(steps + 3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.set_grad_enabled(training):
            y = model(x)
            if training:
                y.float().sum().backward()
        torch.cuda.synchronize()
        if index >= 3:  # the first steps compile and record
            samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def model_steps(device: str) -> list[tuple[str, str, dict[str, float]]]:
    """Step time of each model, training and inference, per variant (eager, Inductor, BOO)."""
    rows = []
    for name, (make, shape) in MODELS.items():
        for training in (False, True):
            times = {}
            for variant, how in VARIANTS.items():
                torch._dynamo.reset()
                model = make(device).train(training)
                x = torch.randn(shape, device=device, dtype=BF16, requires_grad=training)
                if len(shape) == 4:
                    x = x.detach().to(memory_format=torch.channels_last).requires_grad_(training)
                if how is not None:
                    model = torch.compile(model, backend=how[0], mode=how[1])
                try:
                    times[variant] = step_ms(model, x, training)
                except Exception as e:  # a variant that fails is reported, the others still measured
                    print(f"  ({name} {variant}: {type(e).__name__}: {str(e)[:200]})")
                    times[variant] = float("nan")
            rows.append((name, "training" if training else "inference", times))
            print(f"  {name} {rows[-1][1]}: " + ", ".join(f"{v} {t:.2f} ms" for v, t in times.items()), flush=True)
    return rows


def launch_report(device: str) -> None:
    """Host time per launch (direct and IREE routes, against torch) and model step times."""
    direct, torch_host = host_overhead_us(device, "direct")
    iree, _ = host_overhead_us(device, "iree")
    steps = model_steps(device)
    print(f"\nhost time per launch of a 4x4 matmul: BOO direct {direct:.1f} us, BOO through IREE {iree:.1f} us, "
          f"torch {torch_host:.1f} us (target: torch + 10 us)")
    print(f"{'model':<28} {'pass':<10}" + "".join(f"{v:>21}" for v in VARIANTS) + "   (ms per step)")
    for name, kind, times in steps:
        print(f"{name:<28} {kind:<10}" + "".join(f"{times[v]:>21.2f}" for v in VARIANTS))


def forget_verdicts(signature: Signature, device: str) -> None:
    """Remove the recorded verdicts of every formulation of ``signature`` on ``device``."""
    target = resolve_device(device).target
    for formulation in BooOpRegistry.default().formulations(signature, target):
        directory = KernelRequest.create(signature, target, formulation).directory
        if directory is not None and (directory / "verdicts.json").exists():
            (directory / "verdicts.json").unlink()


def verification_cost(table: list[tuple[str, Signature]], device: str) -> tuple[float, float, int]:
    """Median over ``table`` of what verification adds to a first call (check against
    float64 PyTorch, verdict recorded) and to a later process's first call (the recorded
    verdict read), over a load without it. Calls after loading pay nothing: it is done at load."""
    first, later = [], []
    for _, signature in table:
        timings = {}
        for name, verify in (("plain", False), ("first", "auto"), ("later", "auto")):
            clear_launchables()
            if name == "first":
                forget_verdicts(signature, device)
            with settings_override(verify=verify, use_tuned=False):
                start = time.perf_counter()
                try:
                    get_launchable(signature, device)
                except CompileError:
                    break
                timings[name] = time.perf_counter() - start
        if len(timings) == 3:
            first.append(timings["first"] - timings["plain"])
            later.append(timings["later"] - timings["plain"])
    return statistics.median(first), statistics.median(later), len(first)


def pinned_launchables(signature: Signature, device: str, names: list[str]) -> dict[str, object]:
    """The launchable (or why none) of each of ``names`` that ``signature``'s op offers on
    ``device``, untuned and pinned (no fallback to another formulation)."""
    offered = {f.name for f in BooOpRegistry.default().formulations(signature, resolve_device(device).target)}
    found: dict[str, object] = {}
    for name in names:
        if name in offered:
            try:
                with settings_override(use_tuned=False):
                    found[name] = get_launchable(signature, device, formulation=name)
            except CompileError as e:
                found[name] = e
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--only", default="", help="only rows whose name contains this text (or one of "
                        "several texts separated by '|')")
    parser.add_argument("--tune", action="store_true", help="tune every row first (boo tune), then measure")
    parser.add_argument("--tuned", action="store_true", help="also measure the tuned kernels (from a tune before)")
    parser.add_argument("--csv", help="with --tune: every candidate's results as CSV")
    parser.add_argument("--formulations", default="",
                        help="comma-separated formulation names: also time each of them on every row whose op has "
                             "it (pinned, verified like any kernel), in the same run")
    parser.add_argument("--verification-cost", action="store_true",
                        help="measure what default verification adds to first calls")
    parser.add_argument("--launch", action="store_true",
                        help="only host time per launch and model step times (eager, Inductor, BOO, BOO+CUDA graphs)")
    parser.add_argument("--commands", action="store_true",
                        help="print the rows as MIOpenDriver commands (for boo tune --commands-file) and stop")
    parser.add_argument("--traced", action="store_true",
                        help="a second table: the kernels torch.compile gives five traced networks (docstring)")
    args = parser.parse_args()
    wanted = lambda name: any(text in name for text in args.only.split("|"))  # noqa: E731
    first = rows(args.batch)
    if args.traced:
        first += traced_rows(args.batch, args.device, {signature.func_name for _, signature in first})
    if args.commands:
        for name, signature in first:
            if wanted(name):
                print(signature.to_command())
        return
    torch.backends.cudnn.benchmark = True
    if args.launch:
        launch_report(args.device)
        return
    table = [row for row in first if wanted(row[0])]
    tuned = args.tune or args.tuned

    if args.tune:
        from boo_core.signatures.commands import Command
        from boo_core.tools.tune import run_tune
        from boo_core.tune.tuner import TuneOptions

        start = time.time()
        commands = []
        for name, signature in table:
            try:
                commands.append(Command(signature.to_command(), name))
            except Exception as e:
                print(f"(cannot tune {name}: {e})")
        run_tune(commands, TuneOptions(device=args.device, jobs=16, iterations=10, warmup=2), csv_path=args.csv,
                 progress=False)
        print(f"tuned in {time.time() - start:.0f} s")

    def compile_boo(entry):
        results = []
        for use_tuned in ((False, True) if tuned else (False,)):
            try:
                with settings_override(use_tuned=use_tuned):
                    results.append(get_launchable(entry[1], args.device))
            except CompileError as e:
                results.append(e)
        return results

    start = time.time()
    with ThreadPoolExecutor(16) as pool:
        launchables = list(pool.map(compile_boo, table))
    print(f"BOO kernels compiled (or loaded) and verified in {time.time() - start:.0f} s")
    pinned_names = [name for name in args.formulations.split(",") if name]
    with ThreadPoolExecutor(16) as pool:
        pinned = list(pool.map(lambda entry: pinned_launchables(entry[1], args.device, pinned_names), table))

    peak_tflops, peak_gbps = peaks(args.device)
    boo_host, torch_host = host_overhead_us(args.device)
    results = []
    by_formulation = []
    for (name, signature), found, each in zip(table, launchables, pinned, strict=True):
        inputs = signature.get_sample_args(device=args.device)
        torch_us = device_us(torch_baseline(name, signature, args.device), inputs)  # PyTorch's own kernels in its dtype
        if each:
            times = {f: float("nan") if isinstance(k, Exception) else device_us(k, inputs) for f, k in each.items()}
            by_formulation.append((name, torch_us, times))
        inductor_us = float("nan")
        if not args.no_inductor:
            torch._dynamo.reset()
            inductor_us = device_us(torch.compile(signature.eager, dynamic=False), inputs)
        times = [float("nan") if isinstance(kernel, Exception) else device_us(kernel, inputs) for kernel in found]
        best = times[-1]
        compute = signature.flops / (best * 1e-6) / 1e12 / peak_tflops
        memory = signature.bytes_moved / (best * 1e-6) / 1e9 / peak_gbps
        served = "-"
        if not isinstance(found[-1], Exception):
            substituted = found[-1].substitution
            served = (f"{found[-1].formulation}" + (f" + {substituted.label}" if substituted is not None else "")
                      + f", {found[-1].launch}")
        results.append((name, times[0], best, torch_us, inductor_us, max(compute, memory), served))
        print(f"  {name}: BOO {times[0]:.1f} us" + (f", tuned {best:.1f} us" if tuned else "")
              + f", torch {torch_us:.1f} us, inductor {inductor_us:.1f} us ({served})", flush=True)

    print(f"\nmeasured peaks: bf16 matmul {peak_tflops:.0f} TFLOP/s, copy {peak_gbps:.0f} GB/s")
    print(f"host time per launch of a 4x4 matmul: BOO {boo_host:.1f} us, torch {torch_host:.1f} us "
          "(python benchmarks/gpu.py --launch: both routes, and model step times)")
    if args.verification_cost:
        first, later, count = verification_cost(table, args.device)
        print(f"verification on first use adds {first * 1e3:.1f} ms (median over {count} kernels); a later process "
              f"reading the verdict {later * 1e3:.2f} ms; calls after loading: nothing (it happens at load)")
    print(f"{'kernel':<44} {'BOO us':>9} {'tuned us':>9} {'torch us':>9} {'ind. us':>9} {'BOO/torch':>9} "
          f"{'% of peak':>10}  served by (formulation, launch route)")
    for name, default_us, best, torch_us, inductor_us, fraction, served in results:
        print(f"{name:<44} {default_us:>9.1f} {best:>9.1f} {torch_us:>9.1f} {inductor_us:>9.1f} "
              f"{best / torch_us:>9.2f} {100 * fraction:>9.1f}%  {served}")
    if by_formulation:
        print(f"\n{'kernel':<44} {'torch us':>9}" + "".join(f" {f[:22]:>22}" for f in pinned_names)
              + "   (us, and / torch)")
        for name, torch_us, times in by_formulation:
            print(f"{name:<44} {torch_us:>9.1f}" + "".join(
                f" {times[f]:>12.1f} ({times[f] / torch_us:>5.2f})" if f in times else f" {'-':>22}"
                for f in pinned_names))
    for label, part in (("", [r for r in results if not r[0].startswith(TRACED)]),
                        (" (traced networks)", [r for r in results if r[0].startswith(TRACED)])):
        ratios = [r[2] / r[3] for r in part if r[2] == r[2]]
        defaults = [r[1] / r[3] for r in part if r[1] == r[1]]
        if defaults:
            print(f"geometric mean BOO/torch{label}: {statistics.geometric_mean(defaults):.2f} untuned"
                  + (f", {statistics.geometric_mean(ratios):.2f} tuned" if tuned and ratios else "")
                  + f" over {len(ratios)} kernels" + (f", worst {max(ratios):.2f}" if ratios else ""))


if __name__ == "__main__":
    main()
