"""course_lib: the tested library behind *Attention and Transformers from first principles*.

One module per chapter concept; everything a notebook uses is importable from here.
"""

from .attention import attention_pool, parameter_free_self_attention, softmax_attention
from .kernels import (
    KERNELS,
    boxcar_kernel,
    epanechnikov_kernel,
    gaussian_kernel,
    get_kernel,
    triangular_kernel,
)
from .masking import causal_mask, lengths_to_mask, masked_softmax, sequence_mask, valid_lens_to_mask
from .nadaraya_watson import (
    NWKernelRegression,
    fit_nw_kernel_regression,
    leave_one_out,
    nadaraya_watson,
)
from .plotting import plot_curves, plot_kernels, plot_regression, show_heatmaps
from .scoring import (
    AdditiveAttention,
    BilinearAttention,
    CosineAttention,
    DotProductAttention,
    additive_scores,
    bilinear_scores,
    cosine_scores,
    dot_product_scores,
)
from .utils import num_parameters, set_seed, try_gpu

__version__ = "0.1.0"

__all__ = [
    "KERNELS",
    "AdditiveAttention",
    "BilinearAttention",
    "CosineAttention",
    "DotProductAttention",
    "NWKernelRegression",
    "additive_scores",
    "attention_pool",
    "bilinear_scores",
    "boxcar_kernel",
    "causal_mask",
    "cosine_scores",
    "dot_product_scores",
    "epanechnikov_kernel",
    "fit_nw_kernel_regression",
    "gaussian_kernel",
    "get_kernel",
    "lengths_to_mask",
    "leave_one_out",
    "masked_softmax",
    "nadaraya_watson",
    "num_parameters",
    "parameter_free_self_attention",
    "plot_curves",
    "plot_kernels",
    "plot_regression",
    "sequence_mask",
    "set_seed",
    "show_heatmaps",
    "softmax_attention",
    "triangular_kernel",
    "try_gpu",
    "valid_lens_to_mask",
]
