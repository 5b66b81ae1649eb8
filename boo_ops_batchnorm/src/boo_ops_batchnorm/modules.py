"""``BooBatchNorm{1,2,3}d``: drop-in ``torch.nn.BatchNorm{1,2,3}d`` whose forward runs BOO
kernels, and ``convert_batch_norms`` to switch a model's batch norms over in place."""

from __future__ import annotations

import logging

import torch
from torch import nn

from .eager import boo_batch_norm

logger = logging.getLogger(__name__)


class _BooBatchNorm:
    """The forward of torch's ``_BatchNorm`` with :func:`boo_batch_norm` doing the work:
    ``num_batches_tracked`` counts training batches, ``momentum=None`` makes the running
    statistics a cumulative average, ``track_running_stats=False`` always normalizes with
    the batch's statistics, and an eval-mode module without running statistics does too."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        update = not self.training or self.track_running_stats
        return boo_batch_norm(input, self.running_mean if update else None, self.running_var if update else None,
                              self.weight, self.bias, batch_stats, factor, self.eps)


class BooBatchNorm1d(_BooBatchNorm, nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` on BOO kernels: same constructor, parameters, buffers and
    ``state_dict`` as the torch module, which it subclasses."""


class BooBatchNorm2d(_BooBatchNorm, nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` on BOO kernels (channels-last inputs stay channels-last)."""


class BooBatchNorm3d(_BooBatchNorm, nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` on BOO kernels."""


BOO_MODULES: dict[type[nn.Module], type[nn.Module]] = {
    nn.BatchNorm1d: BooBatchNorm1d, nn.BatchNorm2d: BooBatchNorm2d, nn.BatchNorm3d: BooBatchNorm3d}


def convert_batch_norms(model: nn.Module) -> nn.Module:
    """Make every ``torch.nn.BatchNorm{1,2,3}d`` in ``model`` (itself included) run on BOO
    kernels, in place: each keeps its parameters, buffers and hooks; only its class, and
    so its ``forward``, changes. Subclasses of torch's batch norms are left alone. Returns
    ``model``."""
    converted = 0
    for module in model.modules():
        boo_class = BOO_MODULES.get(type(module))
        if boo_class is not None:
            module.__class__ = boo_class
            converted += 1
    logger.info("convert_batch_norms: %d batch norms now run on BOO kernels", converted)
    return model
