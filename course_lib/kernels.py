"""Deprecated name of :mod:`course_lib.smoothing` (chapter 2's smoothing kernels); removed in version 0.3.

"kernel" now means an attention kernel (:mod:`course_lib.attention.kernels`); the smoothing kernels of
Nadaraya--Watson regression live in :mod:`course_lib.smoothing` under the same names.
"""

from .smoothing import KERNELS, boxcar_kernel, epanechnikov_kernel, gaussian_kernel, get_kernel, triangular_kernel

__all__ = ["KERNELS", "boxcar_kernel", "epanechnikov_kernel", "gaussian_kernel", "get_kernel", "triangular_kernel"]
