"""The torch.compile backends ``iree_boo`` and ``iree_boo_inductor``, and their factory.

Both run after AOTAutograd, so forward and backward graphs reach BOO. ``iree_boo`` runs
what BOO does not take eagerly; ``iree_boo_inductor`` hands it to Inductor, BOO's pass
running inside Inductor's own AOTAutograd (never wrapping AOTAutograd twice). The names are
registered through the ``torch_dynamo_backends`` entry-point group, so
``torch.compile(model, backend="iree_boo")`` works without importing BOO first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ..plugins.registry import BooOpRegistry
from ..settings import get_settings
from . import custom_op  # noqa: F401  (registers torch.ops.boo.fused)
from .conv_layouts import channels_last_convolutions
from .cuda_graphs import graphed
from .decompose import decompose_remaining
from .inductor_calls import install
from .rewrite import keep_joint_sums_contiguous, rewrite, rewrite_joint, saved_for_backward

Backend = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


def boo_backend(nested_backend: str | Backend = "eager", *, cuda_graphs: bool = False,
                autotune: bool = False) -> Backend:
    """A torch.compile backend: BOO kernels for what the plugins claim, ``nested_backend``
    for the rest.

    ``nested_backend`` is ``"eager"``, ``"inductor"``, another registered backend's name,
    or a callable ``(graph_module, example_inputs) -> callable``. A callable or a name other
    than those two receives the aten-level graphs AOTAutograd produced, with BOO calls as
    ``torch.ops.boo.fused`` nodes. ``cuda_graphs`` records each compiled graph into a CUDA
    graph (:mod:`.cuda_graphs`; Inductor's own cudagraph trees with ``"inductor"``).
    ``autotune`` times each BOO node against torch's kernel when the graph compiles and
    leaves it to the nested backend where torch's is faster (:mod:`.autotune`).
    """
    if nested_backend == "inductor":
        return functools.partial(_inductor_nested, cuda_graphs=cuda_graphs, autotune=autotune)
    if nested_backend == "eager":
        name, nested, as_custom_op = "iree_boo", None, False
    else:
        name = getattr(nested_backend, "__name__", str(nested_backend))
        nested = _lookup(nested_backend) if isinstance(nested_backend, str) else nested_backend
        as_custom_op = True

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any], *, kind: str):
        rewrite(gm, backend=name, kind=kind, as_custom_op=as_custom_op, autotune=autotune)
        compiled = gm.forward if nested is None else nested(gm, example_inputs)
        # AOTAutograd calls compiled graphs with one list of arguments ("boxed"), freeing them early.
        boxed = compiled if getattr(compiled, "_boxed_call", False) else make_boxed_func(compiled)
        if not cuda_graphs:
            return boxed
        return graphed(boxed, f"{name} {kind} graph", lent=saved_for_backward(gm) if kind == "forward" else (),
                       borrows=kind == "backward")

    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    # Writes into inputs that need no gradient (a batch norm's running statistics) stay in the
    # graph as ``copy_`` nodes, as under Inductor: a CUDA graph's replay then updates the
    # buffers where they are, instead of returning new values that AOTAutograd's wrapper
    # copies in one launch each (ResNet-50: 161 a step, after 159 clones of them).
    traced = aot_autograd(fw_compiler=functools.partial(compiler, kind="forward"),
                          bw_compiler=functools.partial(compiler, kind="backward"),
                          inference_compiler=functools.partial(compiler, kind="inference"),
                          partition_fn=functools.partial(_partition, eager=not as_custom_op),
                          keep_inference_input_mutations=True)

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        _convolutions_channels_last(gm)
        return traced(gm, example_inputs)

    return backend


def _convolutions_channels_last(gm: torch.fx.GraphModule) -> None:
    """Dynamo's graph with channels-last convolutions (:mod:`.conv_layouts`) on the devices
    where graph rewrites apply (``BOO_GRAPH_REWRITES``: GPUs by default)."""
    settings = get_settings()
    channels_last_convolutions(gm, lambda x: settings.rewrites_graphs(x.device.type))


def _partition(joint: torch.fx.GraphModule, joint_inputs: Any, *, eager: bool, **kwargs: Any) -> Any:
    """AOTAutograd's default partition of a training step's joint graph, after the plugins'
    joint rewrites (:func:`.rewrite.rewrite_joint`) and, for an eager nested backend, the
    residual sums' layouts (:mod:`.sum_layouts`: Inductor picks its own)."""
    from torch._functorch.partitioners import default_partition

    if rewrite_joint(joint.graph) | (eager and keep_joint_sums_contiguous(joint.graph)):
        joint.recompile()
    return default_partition(joint, joint_inputs, **kwargs)


def _lookup(name: str) -> Backend:
    from torch._dynamo import lookup_backend

    return lookup_backend(name)


def _inductor_nested(gm: torch.fx.GraphModule, example_inputs: list[Any], *,
                     cuda_graphs: bool = False, autotune: bool = False) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table

    install()  # the generated code calls BOO's kernel calls without the dispatcher
    _convolutions_channels_last(gm)  # as Inductor's layout optimization would, before BOO's patterns see them
    table = select_decomp_table()
    anchors = {anchor for pattern in BooOpRegistry.default().fusion_patterns() for anchor in pattern.anchors}
    # Inductor would decompose some anchors (layer norm, say) before BOO's pass could see them;
    # those BOO does not take are decomposed after it.
    withheld = {op: fn for op, fn in table.items() if op in anchors}
    decompositions = {op: fn for op, fn in table.items() if op not in anchors}

    def inner_compile(graph: torch.fx.GraphModule, inputs: list[Any], **kwargs: Any):
        kind = "backward" if kwargs.get("is_backward") else ("inference" if kwargs.get("is_inference") else "forward")
        rewrite(graph, backend="iree_boo_inductor", kind=kind, as_custom_op=True, autotune=autotune)
        decompose_remaining(graph, withheld, table)
        return compile_fx_inner(graph, inputs, **kwargs)

    from torch._functorch import config as functorch_config

    # Inductor's caches (AOTAutograd's and the FX graph cache) key on the graph and Inductor's
    # configuration, not on BOO's pass: a hit would hand back a graph compiled without BOO (by
    # plain Inductor, say) or with other BOO kernels. BOO's own kernel cache keeps recompiles short.
    # The plugins' joint rewrites run among Inductor's own passes over the joint graph, before its
    # partition. Given as compile_fx's patches, these hold for the backward graph too, which
    # compiles at the first backward, after this call (CUDA graphs patched around the call
    # alone left every training backward without them: 17.2 ms a ResNet-50 step against 8.3).
    patches = {"triton.cudagraphs": cuda_graphs, "fx_graph_cache": False, "joint_custom_pre_pass": rewrite_joint}
    with functorch_config.patch(enable_autograd_cache=False):
        return compile_fx(gm, example_inputs, inner_compile=inner_compile, decompositions=decompositions,
                          config_patches=patches)


#: torch.compile modes that record CUDA graphs (as Inductor's do).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
#: Modes that time each BOO node against torch's kernel (as Inductor's max-autotune tunes its own).
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
KNOWN_MODES = (None, "default", "max-autotune-no-cudagraphs", *CUDA_GRAPH_MODES)


def _wants_cuda_graphs(backend: str, mode: str | None, options: dict[str, Any] | None) -> bool:
    """Whether ``torch.compile(..., mode=, options=)`` asks for CUDA graphs (the mode checked)."""
    if mode not in KNOWN_MODES:
        raise ValueError(f"torch.compile(backend={backend!r}): unknown mode {mode!r}; expected one of "
                         f"{', '.join(repr(m) for m in KNOWN_MODES if m)}")
    unknown = set(options or {}) - {"triton.cudagraphs"}
    if unknown:
        raise ValueError(f"torch.compile(backend={backend!r}) takes only the option 'triton.cudagraphs', "
                         f"not {', '.join(sorted(unknown))}")
    return bool((options or {}).get("triton.cudagraphs", mode in CUDA_GRAPH_MODES))


_iree_boo = {(graphs, tune): boo_backend("eager", cuda_graphs=graphs, autotune=tune)
             for graphs in (False, True) for tune in (False, True)}


def iree_boo(gm: torch.fx.GraphModule, example_inputs: list[Any], *, mode: str | None = None,
             options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """``torch.compile(model, backend="iree_boo")``: BOO kernels, PyTorch eager for the rest;
    ``mode="reduce-overhead"`` records each graph into a CUDA graph, ``"max-autotune"`` also
    keeps a node on BOO only where its kernel is at least as fast as torch's."""
    graphs = _wants_cuda_graphs("iree_boo", mode, options)
    return _iree_boo[graphs, mode in AUTOTUNE_MODES](gm, example_inputs)


def iree_boo_inductor(gm: torch.fx.GraphModule, example_inputs: list[Any], *, mode: str | None = None,
                      options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """``torch.compile(model, backend="iree_boo_inductor")``: BOO kernels, Inductor for the
    rest; ``mode="reduce-overhead"`` turns on Inductor's CUDA graphs, ``"max-autotune"`` also
    keeps a node on BOO only where its kernel is at least as fast as torch's."""
    return _inductor_nested(gm, example_inputs, cuda_graphs=_wants_cuda_graphs("iree_boo_inductor", mode, options),
                            autotune=mode in AUTOTUNE_MODES)
