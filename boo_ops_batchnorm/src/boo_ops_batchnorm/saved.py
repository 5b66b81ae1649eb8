"""What a training step's forward saves for a batch norm's gradient (a joint ``GraphRewrite``).

``aten.native_batch_norm_backward`` takes the running mean and variance as arguments, and a
training step's joint graph passes it the forward's new ones, so AOTAutograd's partition
saves both for the backward graph: two tensors per batch norm (106 of the 425 a ResNet-50
step saves), each one more argument for autograd to hold and the backward to take. A
training gradient (``train=True``) reads only the saved batch statistics, and the op takes
``None`` for both running statistics, so this rewrite passes ``None`` before the graph is
partitioned. No value changes; BOO's backward kernel never read them either.
"""

from __future__ import annotations

import torch
import torch.fx

from boo_core import GraphRewrite

aten = torch.ops.aten

#: Positions of ``running_mean``, ``running_var`` and ``train`` in the op's arguments.
_RUNNING_MEAN, _RUNNING_VAR, _TRAIN = 3, 4, 7


class BackwardReadsNoRunningStatistics(GraphRewrite):
    """A training batch norm's gradient without the running statistics it ignores."""

    name = "bnorm.backward_without_running_statistics"
    anchors = (aten.native_batch_norm_backward.default,)
    graph = "joint"

    def apply(self, node: torch.fx.Node) -> bool:
        args = list(node.args)
        if len(args) <= _TRAIN or args[_TRAIN] is not True or \
                (args[_RUNNING_MEAN] is None and args[_RUNNING_VAR] is None):
            return False
        args[_RUNNING_MEAN] = args[_RUNNING_VAR] = None
        node.args = tuple(args)
        return True
