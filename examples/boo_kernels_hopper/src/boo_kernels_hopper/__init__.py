"""BOO kernel library for Hopper GPUs: 16-bit matmuls, bf16 convolutions and layer norms built with
Triton for sm_90a, supplied through the ``boo_kernel_substitutions`` hook (``boo_kernels_hopper.hooks``)."""

from .gemm import GemmConfig, choose_config
from .ptx import unavailable_reason

__version__ = "0.19.0"

__all__ = ["GemmConfig", "__version__", "choose_config", "unavailable_reason"]
