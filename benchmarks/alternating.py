"""A compiled step with one change off and on, alternating in one process.

The host time a change saves is easily hidden by a shared machine's noise, so this script
compiles the model under ``iree_boo`` (or ``--backend``; backward kernels on for training) once per state and
alternates the two ``--pairs`` times. Per row: the median of per-step times (each step
synchronized), the time per step of ``--steps`` steps run back to back, how many launches of
several-command plans went out as one CUDA graph launch, and how many graphs were recorded
per step after three warm-up steps (0 where every call's buffers repeat). ``--toggle``:

* ``replay``: ``BOO_CUDA_GRAPH_REPLAY`` (plans of several commands relaunched as one graph);
* ``bnorm-direct``: batch norm's direct calls. Off, the training and inference patterns bind
  no direct call and leave the running statistics' conversions to the graph (the behaviour
  before they were added); the backward's direct call stays;
* ``residual``: a training batch norm taking a residual block's sum (and the ReLU after it)
  into its kernel. Off, the sum and the ReLU stay in the graph;
* ``guard-remakes``: a direct call making its C++ metadata check again where a miss was the
  thread's dispatch state alone (``direct_call.GUARD_REMAKES``). Off, the check made at the
  first call stays, and calls it misses take the Python check.
* ``matmul-residual``: a sum after a linear layer (``x + linear(y)``) in the matmul's kernel
  as its C. Off, the sum stays in the graph.
* ``summed-gradient``: a residual block's output-gradient sum and the ReLU's gradient after
  it in the batch-norm backward's kernel, which gives that gradient to the block's other
  branch. Off, both stay in the backward graph.
* ``inductor-direct``: Inductor's generated code calling BOO's kernel calls directly
  (``boo_core.dynamo.inductor_calls``; use with ``--backend iree_boo_inductor``). Off, they
  go through ``torch.ops.boo.fused``'s dispatcher.

``--graphs`` compiles with ``mode="reduce-overhead"`` (BOO's CUDA graphs), where a step's
device time, not its host time, decides. ``--backend iree_boo_inductor`` compiles with that
backend instead.

    python benchmarks/alternating.py [--toggle replay|bnorm-direct|residual|matmul-residual|summed-gradient|
                                               guard-remakes|inductor-direct]
                                     [--model resnet50] [--backend iree_boo] [--inference] [--graphs]
                                     [--pairs 3] [--steps 10]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from boo_core.runtime import direct_call
from boo_core.runtime.cuda import replay
from boo_core.settings import settings_override
from boo_core.testing.models import workload_on


@contextlib.contextmanager
def _bnorm_direct(on: bool) -> Iterator[None]:
    """Batch norm's forward patterns as they are (on), or without direct calls (off)."""
    from boo_ops_batchnorm import fusion

    saved = fusion._direct, fusion._running_conversions
    if not on:
        fusion._direct = lambda *args: None
        fusion._running_conversions = lambda *args: ()
    try:
        yield
    finally:
        fusion._direct, fusion._running_conversions = saved


@contextlib.contextmanager
def _stubbed(module: object, name: str, on: bool) -> Iterator[None]:
    """``module.name`` as it is (on), or a function answering None (off)."""
    saved = getattr(module, name)
    if not on:
        setattr(module, name, lambda *args: None)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _residual(on: bool) -> contextlib.AbstractContextManager:
    """Batch norm's training pattern as it is (on), or never taking a residual sum (off)."""
    from boo_ops_batchnorm import fusion

    return _stubbed(fusion, "_residual_sum", on)


def _summed_gradient(on: bool) -> contextlib.AbstractContextManager:
    """The batch-norm backward pattern as it is (on), or never taking a residual block's
    output-gradient sum and ReLU gradient into its kernel (off)."""
    from boo_ops_batchnorm import fusion

    return _stubbed(fusion, "_summed_relu_gradient", on)


def _matmul_residual(on: bool) -> contextlib.AbstractContextManager:
    """The matmul patterns as they are (on), or never taking the residual added to a
    product into its kernel (off)."""
    from boo_ops_matmul import fusion

    return _stubbed(fusion, "_residual_add", on)


@contextlib.contextmanager
def _guard_remakes(on: bool) -> Iterator[None]:
    """Direct calls remaking their C++ metadata check after a miss (on), or never (off)."""
    saved = direct_call.GUARD_REMAKES
    direct_call.GUARD_REMAKES = saved if on else 0
    try:
        yield
    finally:
        direct_call.GUARD_REMAKES = saved


@contextlib.contextmanager
def _inductor_direct(on: bool) -> Iterator[None]:
    """Inductor's generated code calling BOO's kernel calls directly (on), or through the
    dispatcher (off: Inductor's implicit fallback for the op, as before the direct lowering)."""
    from torch._inductor import lowering

    from boo_core.dynamo import custom_op, inductor_calls  # noqa: F401  (custom_op registers the op)

    saved = inductor_calls.install
    if not on:
        lowering.lowerings.pop(torch.ops.boo.fused.default, None)
        inductor_calls._installed = None  # installed again by the next state that is on
        inductor_calls.install = lambda: False
    try:
        yield
    finally:
        inductor_calls.install = saved


def _state(toggle: str, on: bool) -> contextlib.AbstractContextManager:
    if toggle == "replay":
        return settings_override(cuda_graph_replay=on, use_backward_kernels=True)
    stack = contextlib.ExitStack()
    stack.enter_context(settings_override(use_backward_kernels=True))
    toggled = {"bnorm-direct": _bnorm_direct, "residual": _residual, "guard-remakes": _guard_remakes,
               "inductor-direct": _inductor_direct, "matmul-residual": _matmul_residual,
               "summed-gradient": _summed_gradient}[toggle]
    stack.enter_context(toggled(on))
    return stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toggle", default="replay", choices=["replay", "bnorm-direct", "residual", "guard-remakes",
                                                               "matmul-residual", "summed-gradient",
                                                               "inductor-direct"])
    parser.add_argument("--backend", default="iree_boo", choices=["iree_boo", "iree_boo_inductor"])
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "vit_b_16", "decoder"])
    parser.add_argument("--inference", action="store_true", help="forward steps only (default: training)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--graphs", action="store_true", help="mode='reduce-overhead' (CUDA graphs)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("alternating.py: needs a CUDA GPU (direct calls and replays are CUDA launch features)")
    model, x = workload_on(args.model, args.batch, "cuda", torch.bfloat16)
    model.train(not args.inference)

    counts = {True: 0, False: 0}
    launch, record = replay.GraphReplays.launch, replay.GraphReplays._record

    def counted(self, *call):
        launched = launch(self, *call)
        counts[launched] += 1
        return launched

    def recorded(self, *call):
        counts["recorded"] += 1
        return record(self, *call)

    replay.GraphReplays.launch, replay.GraphReplays._record = counted, recorded
    print(f"{args.model} {'inference' if args.inference else 'training'}, batch {args.batch}, {args.backend}, "
          f"{'CUDA graphs, ' if args.graphs else ''}{torch.cuda.get_device_name()}")
    print(f"| {args.toggle} | median ms/step (synchronized) | ms/step back to back | graph launches | "
          "recordings per step |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for on in [False, True] * args.pairs:
        with _state(args.toggle, on):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=args.backend, dynamic=False,
                                     mode="reduce-overhead" if args.graphs else None)
            step = _step(compiled, model, x, args.inference)
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            counts.update({True: 0, False: 0, "recorded": 0})
            times = []
            for _ in range(args.steps):
                start = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
            back_to_back = (time.perf_counter() - start) * 1e3 / args.steps
        share = counts[True] / max(counts[True] + counts[False], 1)
        recordings = counts["recorded"] / (2 * args.steps)
        print(f"| {'on' if on else 'off'} | {statistics.median(times):.2f} | {back_to_back:.2f} | {share:.0%} | "
              f"{recordings:.1f} |", flush=True)
    replay.GraphReplays.launch, replay.GraphReplays._record = launch, record


def _step(compiled: Callable[[torch.Tensor], torch.Tensor], model: torch.nn.Module, x: torch.Tensor,
          inference: bool) -> Callable[[], None]:
    if inference:
        def forward() -> None:
            with torch.no_grad():
                compiled(x)
        return forward

    def train() -> None:
        model.zero_grad(set_to_none=True)
        compiled(x).float().sum().backward()
    return train


if __name__ == "__main__":
    main()
