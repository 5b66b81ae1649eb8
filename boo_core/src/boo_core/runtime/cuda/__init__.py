"""CUDA kernels launched directly on torch's stream (``BOO_CUDA_LAUNCH=direct``, the default).

A kernel compiled for CUDA carries a launch plan (:mod:`boo_core.kernels.launch_plan`): its
PTX, kernels and commands. :class:`PlanLauncher` loads the PTX into torch's primary context
and replays the commands with the driver API on the caller's current stream, so a call is
ordered like a torch op, returns without waiting for the GPU, and is captured by
``torch.cuda.graph``. A kernel without a plan runs through IREE's runtime.
"""

from .launcher import PlanLauncher

__all__ = ["PlanLauncher"]
