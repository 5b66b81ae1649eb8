"""What replaces matched nodes: a pattern's launch, bound to its spec, with output checks."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import BooError, BooFallbackWarning, PluginExit, describe_error, is_plugins_failure
from ..plugins.patterns import BoundLaunch, FusionPattern
from ..runtime.direct_call import DirectCall
from ..settings import get_settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorMeta:
    """Shape, strides and dtype of one of a call's tensors: an output the rest of the graph
    expects, or an input the call was compiled for."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, value: object) -> TensorMeta | None:
        if not isinstance(value, torch.Tensor):
            return None
        return cls(tuple(value.shape), tuple(value.stride()), value.dtype)

    def to_json(self) -> list:
        return [list(self.shape), list(self.stride), str(self.dtype).removeprefix("torch.")]

    @classmethod
    def from_json(cls, data: list) -> TensorMeta:
        return cls(tuple(data[0]), tuple(data[1]), getattr(torch, data[2]))


class KernelCall:
    """A graph's call of one pattern match: ``pattern.launch(spec, inputs)``.

    The first call (or :meth:`bind`, when the graph compiles) asks the pattern to
    :meth:`~.patterns.FusionPattern.bind` the launch to the inputs' metadata; later calls go
    straight to that, and to ``launch`` only when the bound function declines the tensors
    (or autograd records, which a compiled graph's nodes never need).
    Outputs are checked against what the graph expects and given its strides (a copy only
    when the kernel's layout differs), except those of a bound
    :class:`~boo_core.runtime.direct_call.DirectCall` that allocates exactly those. If the
    launch fails at run time (raises anything), the call warns once and computes
    ``pattern.reference`` instead, unless ``BOO_COMPILE_STRICT=1``.
    """

    def __init__(self, pattern: FusionPattern, spec: Mapping[str, Any], outputs: Sequence[TensorMeta | None],
                 single: bool, inputs: Sequence[TensorMeta | None] = ()) -> None:
        self.pattern = pattern
        self.spec = spec
        self.outputs = tuple(outputs)
        self.single = single
        self.inputs = tuple(inputs)
        self.__name__ = f"boo_{pattern.name.replace('.', '_')}"  # how the generated FX code names it
        self._warned = False
        self._bound: BoundLaunch | None = None
        self._binding_tried = False
        self._exact = False  # the bound launch returns what the graph expects: no check needed

    def bind(self, inputs: Sequence[torch.Tensor]) -> bool:
        """Settle the launch for tensors like ``inputs`` (fake ones will do); whether the
        pattern could. A pattern that fails to bind is launched the general way."""
        self._binding_tried = True
        try:
            self._bound = self.pattern.bind(self.spec, inputs)
            self._exact = isinstance(self._bound, DirectCall) and None not in self.outputs and \
                self._bound.outputs == tuple((m.shape, m.stride, m.dtype) for m in self.outputs)
        except BaseException as e:  # the pattern's bug (sys.exit() too): launch() still serves
            if not is_plugins_failure(e):
                raise
            logger.warning("pattern %s could not bind its launch (%s); launching it the general way",
                           self.pattern.name, describe_error(e))
            self._bound = None
        return self._bound is not None

    def __call__(self, *inputs: torch.Tensor) -> Any:
        if not self._binding_tried:
            self.bind(inputs)
        try:
            bound = self._bound
            if bound is not None and not (torch.is_grad_enabled() and any(t.requires_grad for t in inputs)):
                if self._exact and (result := bound.try_launch(*inputs)) is not None:
                    return result
                result = bound(*inputs)
                if result is not None:
                    return self._conformed(result, getattr(bound, "discarded", ()))
            return self._conformed(self.pattern.launch(self.spec, inputs))
        except BaseException as e:  # BooError, or a pattern's bug (sys.exit() too): PyTorch computes it instead
            raise_unless_absorbed(e, self.pattern)
            if not self._warned:
                warnings.warn(f"BOO kernel for {self.pattern.name} failed at run time ({describe_error(e)}); "
                              "computing it with PyTorch", BooFallbackWarning, stacklevel=2)
                self._warned = True
        return self._conformed(self.pattern.reference(self.spec, inputs))

    def _conformed(self, result: Any, discarded: Sequence[int] = ()) -> Any:
        """``result`` checked against the outputs the graph expects, with their strides (None
        at the ``discarded`` positions of a bound call, which the graph does not read)."""
        values = (result,) if self.single else tuple(result)
        if len(values) != len(self.outputs):
            raise BooError(f"pattern {self.pattern.name} returned {len(values)} values, the graph expects "
                           f"{len(self.outputs)}")
        conformed = tuple(None if v is None and i in discarded else _conform(v, meta, self.pattern.name)
                          for i, (v, meta) in enumerate(zip(values, self.outputs)))
        return conformed[0] if self.single else conformed

    def payload(self) -> str:
        """Everything but the pattern and the tensors, as JSON (the custom op's argument);
        the inputs' metadata is part of it, so calls bound for other strides stay apart."""
        return json.dumps({"spec": self.spec, "single": self.single,
                           "outputs": [m.to_json() if m else None for m in self.outputs],
                           "inputs": [m.to_json() if m else None for m in self.inputs]}, sort_keys=True)

    @classmethod
    def from_payload(cls, pattern: FusionPattern, payload: str) -> KernelCall:
        data = json.loads(payload)
        outputs = [TensorMeta.from_json(m) if m else None for m in data["outputs"]]
        inputs = [TensorMeta.from_json(m) if m else None for m in data.get("inputs", ())]
        return cls(pattern, data["spec"], outputs, data["single"], inputs)


def raise_unless_absorbed(error: BaseException, pattern: FusionPattern) -> None:
    """Re-raise ``error`` unless it is a failure of plugin code that PyTorch can stand in for
    (a BooError, a pattern's bug, its ``sys.exit()``); under ``BOO_COMPILE_STRICT=1`` every
    such failure is raised too (a ``sys.exit()`` as :class:`~boo_core.errors.PluginExit`)."""
    if not is_plugins_failure(error):
        raise error
    if get_settings().compile_strict:
        if isinstance(error, Exception):
            raise error
        raise PluginExit(f"pattern {pattern.name}: {describe_error(error)}") from error


def _conform(value: object, meta: TensorMeta | None, name: str) -> object:
    if meta is None:
        return None
    if not isinstance(value, torch.Tensor) or value.shape != meta.shape or value.dtype != meta.dtype:
        described = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise BooError(f"pattern {name} produced {described}; the graph expects {meta.shape} {meta.dtype}")
    if value.stride() == meta.stride:
        return value
    return torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=value.device).copy_(value)
