"""course_lib: the tested library behind *Attention and Transformers from first principles*.

One module per chapter concept; everything a notebook uses is importable from here.
"""

# Chapters 4-8: multi-head attention, positions, the Transformer, the RNN baseline, training and decoding.
from . import data, diagrams, sparse
from .attention import attention_pool, parameter_free_self_attention, softmax_attention
from .checkpoint import FORMAT_VERSION, CheckpointError, load_checkpoint, save_checkpoint
from .data import (
    DataNotFoundError,
    Seq2SeqData,
    SubwordTokenizer,
    Vocab,
    load_dates,
    load_fra_eng,
    load_fra_eng_subwords,
)
from .decode import beam_search, decode_batch, default_max_len, greedy_decode, sequence_log_prob, translate
from .kernels import (
    KERNELS,
    boxcar_kernel,
    epanechnikov_kernel,
    gaussian_kernel,
    get_kernel,
    triangular_kernel,
)
from .masking import causal_mask, lengths_to_mask, masked_softmax, sequence_mask, valid_lens_to_mask
from .metrics import bleu, corpus_bleu, exact_match
from .multihead import KVCache, MultiHeadAttention, store_attention_weights
from .nadaraya_watson import (
    NWKernelRegression,
    fit_nw_kernel_regression,
    leave_one_out,
    nadaraya_watson,
)
from .plotting import plot_curves, plot_kernels, plot_regression, show_heatmaps
from .positional import LearnedPositionalEmbedding, PositionalEncoding, sinusoidal_table
from .progress import progress, progress_mode
from .rnn import (
    BahdanauDecoder,
    BahdanauSeq2Seq,
    RNNDecoderState,
    RNNEncoder,
    Seq2SeqDecoder,
    Seq2SeqRNN,
    Seq2SeqRNNConfig,
)
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
from .seq2seq import Seq2SeqModel
from .sparse import (
    SparseMultiHeadAttention,
    default_stride,
    dense_attention,
    fixed_attention,
    fixed_pattern,
    fused_attention,
    peak_memory,
    strided_attention,
    strided_pattern,
    use_sparse_attention,
)
from .train import (
    TrainHistory,
    evaluate,
    evaluate_loss,
    masked_cross_entropy,
    predict_split,
    train_seq2seq,
    warmup_lr,
)
from .training_plots import plot_history
from .transformer import (
    AddNorm,
    PositionWiseFFN,
    Transformer,
    TransformerConfig,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerDecoderState,
    TransformerEncoder,
    TransformerEncoderBlock,
)
from .utils import global_state_preserved, glue, model_device, num_parameters, seeded, set_seed, try_gpu

__version__ = "0.1.0"

__all__ = [
    "AddNorm",
    "AdditiveAttention",
    "BahdanauDecoder",
    "BahdanauSeq2Seq",
    "BilinearAttention",
    "CheckpointError",
    "CosineAttention",
    "DataNotFoundError",
    "DotProductAttention",
    "FORMAT_VERSION",
    "KERNELS",
    "KVCache",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "NWKernelRegression",
    "PositionWiseFFN",
    "PositionalEncoding",
    "RNNDecoderState",
    "RNNEncoder",
    "Seq2SeqData",
    "Seq2SeqDecoder",
    "Seq2SeqModel",
    "Seq2SeqRNN",
    "Seq2SeqRNNConfig",
    "SparseMultiHeadAttention",
    "SubwordTokenizer",
    "TrainHistory",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoder",
    "TransformerDecoderBlock",
    "TransformerDecoderState",
    "TransformerEncoder",
    "TransformerEncoderBlock",
    "Vocab",
    "additive_scores",
    "attention_pool",
    "beam_search",
    "bilinear_scores",
    "bleu",
    "boxcar_kernel",
    "causal_mask",
    "corpus_bleu",
    "cosine_scores",
    "data",
    "decode_batch",
    "default_max_len",
    "default_stride",
    "dense_attention",
    "diagrams",
    "dot_product_scores",
    "epanechnikov_kernel",
    "evaluate",
    "evaluate_loss",
    "exact_match",
    "fit_nw_kernel_regression",
    "fixed_attention",
    "fixed_pattern",
    "fused_attention",
    "gaussian_kernel",
    "get_kernel",
    "global_state_preserved",
    "glue",
    "greedy_decode",
    "leave_one_out",
    "lengths_to_mask",
    "load_checkpoint",
    "load_dates",
    "load_fra_eng",
    "load_fra_eng_subwords",
    "masked_cross_entropy",
    "masked_softmax",
    "model_device",
    "nadaraya_watson",
    "num_parameters",
    "parameter_free_self_attention",
    "peak_memory",
    "plot_curves",
    "plot_history",
    "plot_kernels",
    "plot_regression",
    "predict_split",
    "progress",
    "progress_mode",
    "save_checkpoint",
    "seeded",
    "sequence_log_prob",
    "sequence_mask",
    "set_seed",
    "show_heatmaps",
    "sinusoidal_table",
    "softmax_attention",
    "sparse",
    "store_attention_weights",
    "strided_attention",
    "strided_pattern",
    "train_seq2seq",
    "translate",
    "triangular_kernel",
    "try_gpu",
    "use_sparse_attention",
    "valid_lens_to_mask",
    "warmup_lr",
]
