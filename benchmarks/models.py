"""Whole networks under torch.compile: eager, Inductor, iree_boo and iree_boo_inductor, with
and without CUDA graphs, inference and training, measured in one run.

Models: torchvision's ResNet-50 (channels-last; ``resnet50_nchw``: the same network left
channels-first) and ViT-B/16, random weights, and the
GPT-style decoder block of ``boo_core.testing.models`` (8 x 1024 tokens, width 1024); bf16 on
a GPU, float32 on the CPU. Per row: milliseconds per step (forward, or forward and backward
of a fixed random projection of the output; ``max-autotune`` rows keep a node on BOO only
where its kernel timed at least as fast as torch's), the relative error of the output and of the
parameters' gradients (the worst parameter's) against the same step of a float64 copy of the
model, eager's own row giving the error its dtype alone makes (one ReLU input within rounding of
zero that lands on the other side of it moves a float32 gradient error from ~1e-6 to ~1e-3: a
channels-first ResNet-18 on the CPU, one of 131,072 elements at 1.2e-6 in float64 and 0 after
BOO's f32 kernels; not a wrong kernel), and the offload share: the fraction of the step's
convolution, matmul, attention and normalization FLOPs (forward and backward graphs) that
BOO kernels ran, from the offload summary. ``torch FLOPs`` cross-checks it with the
profiler: the FLOPs torch's own ops executed in one step (the nested backend's share), as
a fraction of the step's total.

    python benchmarks/models.py [--models resnet50,vit_b_16,decoder] [--passes inference,training]
                                (--models also takes resnet50_nchw, resnext50_32x4d and convnext_tiny)
                                [--batch 32] [--steps 10] [--no-graphs] [--backward-kernels 0,1] [--small]
                                [--dtype auto|bfloat16|float32]
                                [--graph-replay 0,1] [--reorders 0,1] [--profile N] [--timeline N] [--host-profile N]

``--graph-replay 0,1`` measures BOO's configurations with and without
``BOO_CUDA_GRAPH_REPLAY`` (a kernel of several commands relaunched as one CUDA graph);
``--reorders 0,1`` with and without the pass that skips copies only reordering elements
(``boo_core.dynamo.reorders``).
A row where a BOO kernel failed at run time and PyTorch computed its node instead (a
``BooFallbackWarning``) is followed by a ``FELL BACK TO PYTORCH`` line per distinct failure.
``--small`` runs ResNet-18 at 64 x 64, a two-layer ViT and a narrow decoder block (a CPU
smoke run). Compile time (the first step) is printed per row too. ``--profile N`` prints,
under each row without CUDA graphs, where one step's device time goes: its N costliest
kernels (by name, with their launches per step), the step's total device time, and that total
by kind (BOO's convolutions by mode, cuDNN's, cuBLAS's, batch norms, pooling...: ``by_kind``).
Under each row with CUDA graphs it prints the step's device timeline instead: the time its kernels kept
the GPU busy, the span from the first kernel's start to the last one's end, the idle time between
kernels by the length of the gap, and the N longest gaps with the kernels around them.
``--timeline N`` prints that device timeline under every row on a GPU, graphless rows too (where
a step's kernels wait on the host between launches; the profiler slows the host, so read its
gaps against each other), and the host's CUDA runtime and driver calls by their total time (a
synchronization or an allocation that blocks the host shows there). ``--host-profile N``
prints, under every row (CUDA graphs' too), where
one step's host time goes: the N Python functions with the most time of their own over a few
steps (cProfile, which slows every Python call alike), in microseconds per step, with their
calls per step.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import itertools
import pstats
import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from unittest import mock

import torch

from boo_core.dynamo import copy_chains, cuda_graphs, offload_summary, reorders, reset_offload_summary, rewrite
from boo_core.errors import BooFallbackWarning
from boo_core.settings import settings_override
from boo_core.testing.models import WORKLOADS, workload_on


@dataclass
class Workload:
    name: str
    model: torch.nn.Module
    make_input: Callable[[], torch.Tensor]


#: The networks --models takes: boo_core.testing.models' workloads but the distributed
#: tests' tiny one (the issue's three, and two with grouped convolutions; 7x7 depthwise ones
#: and channels-last layer norms).
MODELS = tuple(name for name in WORKLOADS if name != "tiny_convnet")


def workloads(names: list[str], device: str, dtype: torch.dtype, batch: int, small: bool) -> list[Workload]:
    found = []
    for name in names:
        if name not in MODELS:
            raise SystemExit(f"--models: unknown model {name!r} ({', '.join(MODELS)})")
        # The decoder block runs 8 sequences of 1,024 tokens whatever --batch says (the shape).
        model, example = workload_on(name, 8 if name == "decoder" and not small else batch, device, dtype,
                                     small=small, generator=torch.Generator().manual_seed(1))
        found.append(Workload(name, model, lambda example=example: example))
    return found


def step_fn(model: Callable[[torch.Tensor], torch.Tensor], training: bool, probe: torch.Tensor | None,
            params: list[torch.nn.Parameter]) -> Callable[[torch.Tensor], tuple[torch.Tensor, list[torch.Tensor]]]:
    def step(x: torch.Tensor):
        if not training:
            with torch.no_grad():
                return model(x), []
        for p in params:
            p.grad = None
        y = model(x)
        (y.float() * probe).sum().backward()
        return y, [p.grad for p in params]

    return step


def float64_step(model: torch.nn.Module, training: bool, probe: torch.Tensor | None,
                 x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The output and parameters' gradients of one step of a float64 copy of ``model``: what
    every row's errors are measured against."""
    reference = copy.deepcopy(model).double()
    params = [p for p in reference.parameters() if p.requires_grad]
    y, grads = step_fn(reference, training, None if probe is None else probe.double(), params)(x.double())
    return y.detach(), [g.detach() for g in grads]


def relative_error(got: torch.Tensor | None, want: torch.Tensor | None) -> float:
    if got is None or want is None:
        return float("nan") if (got is None) != (want is None) else 0.0
    got, want64 = got.detach(), want.detach().double()
    return float((got.double() - want64).norm() / want64.norm().clamp_min(1e-30))


def timed_ms(step: Callable[[], object], steps: int, sync: Callable[[], None]) -> float:
    sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def profiled_torch_flops(step: Callable[[], object], device: str) -> float:
    """FLOPs torch's own ops ran in one step (the profiler's count; BOO's kernels have none)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, with_flops=True) as prof:
        step()
    return float(sum(e.flops or 0 for e in prof.key_averages()))


def kernel_profile(step: Callable[[], object], device: str, top: int) -> list[str]:
    """Table rows: the ``top`` kernels of one step by device time, and the step's total."""
    activity = torch.profiler.ProfilerActivity.CUDA if device.startswith("cuda") else \
        torch.profiler.ProfilerActivity.CPU
    with torch.profiler.profile(activities=[activity]) as prof:
        step()
        torch.cuda.synchronize() if device.startswith("cuda") else None
    events = [e for e in prof.key_averages() if e.device_time_total > 0] if device.startswith("cuda") else \
        list(prof.key_averages())
    timed = sorted(events, key=lambda e: -(e.device_time_total or e.cpu_time_total))
    total = sum(e.device_time_total for e in events)
    rows = [f"|  |  | device time {total / 1e3:.2f} ms in {sum(e.count for e in events)} kernels |"] if total else []
    if total:
        rows.append(f"|  |  | by kind: {by_kind((e.key, e.device_time_total, e.count) for e in events)} |")
    for e in timed[:top]:
        rows.append(f"|  |  | {e.device_time_total or e.cpu_time_total:9.1f} us x{e.count:<4} {e.key[:110]} |")
    return rows


#: What a GPU kernel computes, from its name: (pattern, kind), the first match wins. BOO's
#: kernels carry their signature's name (``conv2d_wrw_...``, IREE's ``..._dispatch_N`` or a
#: substituted library kernel of the same executable); cuDNN's say fprop, dgrad or wgrad;
#: cuBLAS's and CUTLASS's serve matmuls and cuDNN's 1x1 convolutions alike.
KERNEL_KINDS = tuple((re.compile(pattern), kind) for pattern, kind in (
    (r"^conv[123]d_fwd", "BOO conv forward"), (r"^conv[123]d_bwd", "BOO conv data gradient"),
    (r"^conv[123]d_wrw", "BOO conv weight gradient"), (r"^cbainfer", "BOO conv + batch norm"),
    (r"^bnorm", "BOO batch norm"), (r"^layernorm", "BOO layer norm"), (r"^matmul", "BOO matmul"),
    (r"fprop", "cuDNN conv forward"), (r"dgrad", "cuDNN conv data gradient"),
    (r"wgrad", "cuDNN conv weight gradient"),
    (r"nvjet|cutlass|cublas|gemm|splitKreduce", "cuBLAS/CUTLASS (matmuls, cuDNN's 1x1 convs)"),
    (r"^triton", "Inductor's Triton kernels"), (r"batch_norm", "torch batch norm"),
    (r"layer_norm", "torch layer norm"), (r"pool", "torch pooling"),
    (r"^Memset|^Memcpy", "memsets and copies"), (r"", "other torch kernels")))


def by_kind(kernels: Iterable[tuple[str, float, int]]) -> str:
    """``(name, device µs, launches)`` of a step's kernels summed by :data:`KERNEL_KINDS`,
    costliest first: where the step's device time goes, comparable between backends."""
    totals: dict[str, list[float]] = {}
    for name, us, count in kernels:
        kind = next(k for pattern, k in KERNEL_KINDS if pattern.search(name))
        entry = totals.setdefault(kind, [0.0, 0])
        entry[0] += us
        entry[1] += count
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    return "; ".join(f"{kind} {us:.0f} us ({count:.0f})" for kind, (us, count) in ranked)


#: Gaps between a graphed step's kernels, by length (µs): a graph's own spacing of dependent
#: kernels, short host work, and the host between the graphs (or a synchronization).
GAP_CLASSES = ((2.0, "under 2 us"), (20.0, "2-20 us"), (float("inf"), "20 us and more"))


def device_timeline(step: Callable[[], object], top: int) -> list[str]:
    """Table rows: one step's kernels on the GPU's timeline (CUDA graphs' replays included),
    their busy time against their span, the idle gaps by length, and the ``top`` longest."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start)
    if not spans:
        return ["|  |  | device timeline: the profiler saw no kernel |"]
    busy, gaps, end, before = 0.0, [], spans[0][0], spans[0][2]
    for start, stop, name in spans:
        if start > end:
            gaps.append((start - end, before, name))
        busy += max(0.0, stop - max(start, end))
        if stop > end:
            end, before = stop, name
    span = end - spans[0][0]
    by_class, low = [], 0.0
    for high, label in GAP_CLASSES:
        chosen = [g for g, _, _ in gaps if low <= g < high]
        by_class.append(f"{label}: {len(chosen)} = {sum(chosen) / 1e3:.2f} ms")
        low = high
    rows = [f"|  |  | device timeline: {len(spans)} kernels busy {busy / 1e3:.2f} ms of a {span / 1e3:.2f} ms span; "
            f"gaps {'; '.join(by_class)} |"]
    rows.append(f"|  |  | host's CUDA calls: {_driver_calls(prof.events())} |")
    for gap, after, next_name in sorted(gaps, reverse=True)[:top]:
        rows.append(f"|  |  | {gap:9.1f} us idle after {after[:60]} before {next_name[:60]} |")
    return rows


def _driver_calls(events, top: int = 6) -> str:
    """The host's CUDA runtime and driver calls of a profiled step, by total time: a
    synchronization or an allocation that blocks the host shows here, a launch's cost too."""
    totals: dict[str, list[float]] = {}
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CUDA and e.name.startswith("cu"):
            entry = totals.setdefault(e.name, [0, 0.0])
            entry[0] += 1
            entry[1] += e.time_range.end - e.time_range.start
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]
    return "; ".join(f"{name} x{count} {total / 1e3:.2f} ms" for name, (count, total) in ranked) or "none seen"


def host_profile(step: Callable[[], object], sync: Callable[[], None], top: int, steps: int = 5) -> list[str]:
    """Table rows: the ``top`` Python functions of a step by their own time (cProfile), per step."""
    sync()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    sync()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (primitive calls, calls, own s, cumulative s, callers)
    total = sum(own for _, _, own, _, _ in stats.values())
    rows = [f"|  |  | host time (cProfile) {total / steps * 1e3:.2f} ms per step |"]
    for (path, line, name), (_, calls, own, cumulative, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        where = f"{path.rsplit('/', 2)[-1] if path != '~' else ''}:{line} {name}"
        rows.append(f"|  |  | {own / steps * 1e6:9.1f} us own, {cumulative / steps * 1e6:9.1f} us with callees, "
                    f"x{calls // steps:<4} {where[:100]} |")
    return rows


def measure(work: Workload, training: bool, probe: torch.Tensor | None, params: list[torch.nn.Parameter],
            x: torch.Tensor, backend: str | None, mode: str | None, want_y: torch.Tensor,
            want_grads: list[torch.Tensor], device: str, steps: int, sync: Callable[[], None],
            profile_top: int = 0, host_top: int = 0, timeline_top: int = 0) -> tuple | str:
    """One configuration: (ms per step, first step s, output error, gradient error, BOO share
    of FLOPs, torch's share by the profiler, reasons ops were left), or why it failed."""
    torch._dynamo.reset()
    reset_offload_summary()
    model = work.model if backend is None else torch.compile(work.model, backend=backend, mode=mode, dynamic=False)
    step = step_fn(model, training, probe, params)
    start = time.perf_counter()
    try:
        step(x)
        sync()
    except Exception as e:  # one configuration failing must not hide the others
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    first = time.perf_counter() - start
    for _ in range(2):
        step(x)
    ms = timed_ms(lambda: step(x), steps, sync)
    got_y, got_grads = step(x)
    y_err = relative_error(got_y, want_y)
    g_err = max((relative_error(g, w) for g, w in zip(got_grads, want_grads)), default=0.0)
    # Gradients held past the next backward keep BOO's CUDA graphs from lending theirs (cuda_graphs).
    del got_y, got_grads
    boo = backend is not None and "iree" in backend
    summary = offload_summary()
    total = summary.boo_flops + sum(summary.nested_flops.values())
    torch_share = None
    if boo and total and mode is None:  # the profiler sees no op inside a CUDA graph
        torch_share = profiled_torch_flops(lambda: step(x), device) / total
    profile = []
    graphed = mode is not None and device.startswith("cuda")
    if profile_top:
        profile = device_timeline(lambda: step(x), profile_top) if graphed else \
            kernel_profile(lambda: step(x), device, profile_top)
    if timeline_top and not (profile_top and graphed) and device.startswith("cuda"):
        profile += device_timeline(lambda: step(x), timeline_top)
    if host_top:  # cProfile sees the host's side of a replayed step too
        profile += host_profile(lambda: step(x), sync, host_top)
    return ms, first, y_err, g_err, summary.offload_share if boo else None, torch_share, summary.reasons, profile


CONFIGS = [  # (label, backend, torch.compile mode)
    ("eager", None, None),
    ("inductor", "inductor", None),
    ("iree_boo", "iree_boo", None),
    ("iree_boo_inductor", "iree_boo_inductor", None),
    ("inductor +graphs", "inductor", "reduce-overhead"),
    ("iree_boo +graphs", "iree_boo", "reduce-overhead"),
    ("iree_boo_inductor +graphs", "iree_boo_inductor", "reduce-overhead"),
    # Each BOO node timed against torch's kernel at compile, kept only where BOO's is as fast (+ graphs).
    ("iree_boo max-autotune", "iree_boo", "max-autotune"),
    ("iree_boo_inductor max-autotune", "iree_boo_inductor", "max-autotune"),
]


def _keeping_copies(gm: torch.fx.GraphModule) -> int:
    """``--reorders 0``: the pass that skips reordering copies, skipped."""
    return 0


def _chosen(label: str, only: str) -> bool:
    """Whether ``--only`` picks the configuration ``label``: a substring, or a comma-separated list of labels."""
    return label in only.split(",") if "," in only else only in label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="resnet50,vit_b_16,decoder")
    parser.add_argument("--passes", default="inference,training")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph rows")
    parser.add_argument("--backward-kernels", default="1",
                        help="BOO_USE_BACKWARD_KERNELS values to measure training under (e.g. 0,1,bnorm+layernorm: "
                             "op names joined by +)")
    parser.add_argument("--graph-replay", default="1",
                        help="BOO_CUDA_GRAPH_REPLAY values for BOO's configurations (0,1: both, in one run)")
    parser.add_argument("--reorders", default="1",
                        help="whether BOO's eager-nested graphs skip reordering copies (boo_core.dynamo.reorders; "
                             "0,1: both, in one run)")
    parser.add_argument("--only", default="",
                        help="run only configurations whose label contains this (and eager); comma-separated "
                             "labels: exactly those (and eager)")
    parser.add_argument("--small", action="store_true", help="small models (a CPU smoke run)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print each row's N costliest kernels of one step (rows without CUDA graphs)")
    parser.add_argument("--timeline", type=int, default=0, metavar="N",
                        help="print every row's device timeline with its N longest idle gaps (graphless rows too)")
    parser.add_argument("--host-profile", type=int, default=0, metavar="N",
                        help="print each row's N Python functions with the most host time")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="the models' dtype (auto: bfloat16 on a GPU, float32 on the CPU)")
    args = parser.parse_args()

    cuda = args.device.startswith("cuda")
    dtype = (torch.bfloat16 if cuda else torch.float32) if args.dtype == "auto" else getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    configs = [c for c in CONFIGS if c[1] is None or ((cuda or "graphs" not in c[0])
                                                      and not (args.no_graphs and "graphs" in c[0])
                                                      and _chosen(c[0], args.only))]
    print(f"device {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}, {dtype}, "
          f"batch {args.batch}, median of {args.steps} steps")
    print("| model | pass | configuration | bwd kernels | ms/step | vs eager | first step s | output err (vs f64) | "
          "grad err | BOO share of FLOPs | torch FLOPs (profiler) |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for work in workloads(args.models.split(","), args.device, dtype, args.batch, args.small):
        params = [p for p in work.model.parameters() if p.requires_grad]
        x = work.make_input()
        for pass_name in args.passes.split(","):
            training = pass_name == "training"
            work.model.train(training)
            probe = None
            if training:
                with torch.no_grad():
                    shape = work.model(x).shape
                probe = torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(args.device)
            want_y, want_grads = float64_step(work.model, training, probe, x)
            eager_ms = None
            for label, backend, mode in configs:
                boo = backend is not None and "iree" in backend
                for bwd, replay, reorder in itertools.product(
                        args.backward_kernels.split(",") if training and boo else ["-"],
                        args.graph_replay.split(",") if boo else ["1"], args.reorders.split(",") if boo else ["1"]):
                    overrides = {"cuda_graph_replay": replay == "1"}
                    if bwd != "-":
                        overrides["use_backward_kernels"] = {"0": False, "1": True}.get(bwd, bwd.replace("+", ","))
                    fallbacks, chain_fallbacks = reorders.fallbacks, copy_chains.fallbacks
                    with settings_override(**overrides), \
                            mock.patch.object(rewrite, "skip_reordering_copies", _keeping_copies) if reorder == "0" \
                            else contextlib.nullcontext(), warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always", BooFallbackWarning)
                        row = measure(work, training, probe, params, x, backend, mode, want_y, want_grads,
                                      args.device, args.steps, sync, args.profile, args.host_profile,
                                      args.timeline)
                    fell_back = sorted({str(w.message) for w in caught if issubclass(w.category, BooFallbackWarning)})
                    label_text = label + ("" if replay == "1" else " (no graph replay)") + \
                        ("" if reorder == "1" else " (reordering copies kept)")
                    if isinstance(row, str):
                        print(f"| {work.name} | {pass_name} | {label_text} | {bwd} | failed: {row} |")
                        continue
                    ms, first, y_err, g_err, share, torch_share, reasons, profile = row
                    eager_ms = ms if backend is None else eager_ms
                    share_text = "-" if share is None else f"{share:.1%}"
                    flops_text = "-" if torch_share is None else f"{torch_share:.1%}"
                    print(f"| {work.name} | {pass_name} | {label_text} | {bwd} | {ms:.2f} | {ms / eager_ms:.2f} | "
                          f"{first:.1f} | {y_err:.2e} | {g_err:.2e} | {share_text} | {flops_text} |", flush=True)
                    for message in fell_back:  # a BOO kernel PyTorch stood in for: the row is not all BOO's
                        print(f"|  |  | FELL BACK TO PYTORCH: {message} |")
                    tree_skips = torch._dynamo.utils.counters["inductor"].pop("cudagraph_skips", 0)
                    if tree_skips:  # Inductor's cudagraph trees ran a graph without recording it
                        print(f"|  |  | graphs left unrecorded by the cudagraph trees: {tree_skips} "
                              "(TORCH_LOGS=perf_hints says why) |")
                    if backend == "iree_boo" and mode is not None:
                        for f in cuda_graphs.graphed_functions():
                            print(f"|  |  | {f.name}: {f.replays} replays; without the graph: "
                                  f"{f.unreplayable_runs} (other tensors), {f.unlent_runs} (lent memory held) |")
                    graphs = offload_summary().graphs
                    skipped = sum(g.skipped_reorders for g in graphs)
                    if skipped or reorders.fallbacks != fallbacks:
                        print(f"|  |  | reordering copies skipped: {skipped} per compile; views that met another "
                              f"layout and copied: {reorders.fallbacks - fallbacks} |")
                    collapsed = sum(g.collapsed_copies for g in graphs)
                    if collapsed or copy_chains.fallbacks != chain_fallbacks:
                        print(f"|  |  | copies of copy chains not made: {collapsed} per compile; chains that met "
                              f"another layout and copied: {copy_chains.fallbacks - chain_fallbacks}; sums of "
                              f"selections' gradients stacked: {sum(g.stacked_gradients for g in graphs)} |")
                    column_sums = sum(g.column_sums for g in graphs)
                    if column_sums:
                        print(f"|  |  | sums over leading dims made products with ones: {column_sums} per compile |")
                    if share is not None and reasons:
                        left = "; ".join(f"{op}: {why}" for op, why in list(reasons.items())[:4])
                        print(f"|  |  | left to the nested backend: {left} |")
                    print("\n".join(profile)) if profile else None


if __name__ == "__main__":
    main()
