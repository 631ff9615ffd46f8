"""course_lib: the tested library behind *Attention and Transformers from first principles*.

One module per concept, in packages that show the layers (lower ones never import higher ones):

- ``attention``: the attention wing: the kernel contract and registry, masks and score modifiers,
  multi-head attention, the key/value caches, recording, chapter 3's scoring modules, every kernel
  (``attention.kernels``) and chapter 9's sparse package (``attention.sparse``);
- ``models``: positions, the Transformer, the RNN baselines, the decoder-only language model and its
  Hugging Face conversion;
- ``decoding``: greedy, beam search and sampling, for translators and language models alike;
- ``training``: the loss, the training loops, checkpoints and ``torchrun``;
- ``data``: datasets, vocabularies and tokenizers;
- ``teaching``: what only the book needs: plots, diagrams and the exercises' checkers (imported on
  first use, so ``import course_lib`` does not import matplotlib);
- ``assignments``: the instructor's tooling (student notebooks, grading).

Chapters 1 and 2 live at the top: ``pooling`` (attention pooling), ``smoothing`` (smoothing kernels)
and ``nadaraya_watson``. Everything a notebook uses is importable from here, flat: ``cl.MultiHeadAttention``.
"""

from . import data
from .attention import sparse
from .attention.cache import BlockPool, Cache, KVCache, PagedKVCache, SinkCache, SlidingWindowCache
from .attention.contract import AttentionKernel, Capabilities, repeat_kv
from .attention.kernels.alibi import ALiBiKernel, alibi_bias, alibi_mod, alibi_slopes
from .attention.kernels.explicit import explicit_kernel
from .attention.kernels.flash import (
    FlashIO,
    FlashKernel,
    OnlineSoftmax,
    flash1_io,
    flash_attention,
    flash_io,
    flash_tile_map,
    online_softmax,
)
from .attention.kernels.fused import fused_kernel
from .attention.kernels.linear import (
    LINEAR_ATTENTION_MODES,
    LinearAttentionState,
    LinearKernel,
    elu_feature_map,
    feature_map_kernel,
    linear_attention,
    linear_attention_step,
    nadaraya_watson_attention,
)
from .attention.kernels.rotary import (
    RotaryEmbedding,
    RotaryKernel,
    apply_rotary,
    rope_angles,
    rope_scaling_parameters,
    rotary_embedding,
    rotary_frequencies,
    rotary_permutation,
)
from .attention.kernels.sliding_window import SlidingWindowKernel
from .attention.masks import (
    MaskMod,
    causal_mask,
    causal_mod,
    keep_mask,
    lengths_to_mask,
    masked_softmax,
    padding_mask,
    padding_mod,
    query_positions,
    sequence_mask,
    sliding_window_mod,
    softmax_with_keep,
    valid_lens_to_mask,
)
from .attention.multihead import MultiHeadAttention
from .attention.recording import AttentionModule, attention_modules, recording_attention, store_attention_weights
from .attention.registry import attend, attention_kernel, kernel_names, register_kernel
from .attention.score_mods import ScoreMod
from .attention.scoring import (
    AdditiveAttention,
    BilinearAttention,
    CosineAttention,
    DotProductAttention,
    additive_scores,
    bilinear_scores,
    cosine_scores,
    dot_product_scores,
)
from .attention.sparse import (
    SparseKernel,
    SparseMultiHeadAttention,
    default_stride,
    dense_attention,
    fixed_attention,
    fixed_pattern,
    fused_attention,
    peak_memory,
    strided_attention,
    strided_pattern,
)
from .data import (
    DataNotFoundError,
    LMData,
    Seq2SeqData,
    SubwordTokenizer,
    Vocab,
    load_dates,
    load_english_lm,
    load_fra_eng,
    load_fra_eng_subwords,
    load_python_lm,
)
from .decoding.protocol import Seq2SeqModel
from .decoding.sampling import next_token_probs, sample_next, top_k_filter, top_p_filter
from .decoding.search import beam_search, decode_batch, default_max_len, greedy_decode, sequence_log_prob, translate
from .decoding.speculative import SpeculativeStats, speculative_generate
from .metrics import bleu, corpus_bleu, detokenized_bleu, exact_match
from .models.decoder_lm import (
    DecoderLM,
    DecoderLMBlock,
    DecoderLMConfig,
    DecoderLMState,
    RMSNorm,
    SwiGLU,
    swiglu_hidden_size,
)
from .models.positional import LearnedPositionalEmbedding, PositionalEncoding, sinusoidal_table
from .models.rnn import (
    BahdanauDecoder,
    BahdanauSeq2Seq,
    RNNDecoderState,
    RNNEncoder,
    Seq2SeqDecoder,
    Seq2SeqRNN,
    Seq2SeqRNNConfig,
)
from .models.transformer import (
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
from .nadaraya_watson import (
    NWKernelRegression,
    fit_nw_kernel_regression,
    leave_one_out,
    nadaraya_watson,
)
from .pooling import attention_pool, parameter_free_self_attention, softmax_attention
from .progress import progress, progress_mode
from .smoothing import (
    KERNELS,
    boxcar_kernel,
    epanechnikov_kernel,
    gaussian_kernel,
    get_kernel,
    triangular_kernel,
)
from .training.checkpoint import (
    FORMAT_VERSION,
    LM_FORMAT_VERSION,
    CheckpointError,
    load_checkpoint,
    load_lm_checkpoint,
    save_checkpoint,
    save_lm_checkpoint,
)
from .training.loss import cross_entropy
from .training.train import (
    TrainHistory,
    evaluate,
    evaluate_lm,
    evaluate_loss,
    lm_position_losses,
    masked_cross_entropy,
    predict_split,
    train_lm,
    train_seq2seq,
    warmup_lr,
)
from .utils import (
    by_device,
    global_state_preserved,
    glue,
    model_device,
    num_parameters,
    seeded,
    set_seed,
    try_gpu,
)

__version__ = "0.2.0"

# The teaching machinery draws with matplotlib: its names are imported when first used.
_LAZY = {
    "diagrams": ("course_lib.teaching.diagrams", None),
    "BOOK_STYLE": ("course_lib.teaching.plotting", "BOOK_STYLE"),
    "COLUMN_WIDTH": ("course_lib.teaching.plotting", "COLUMN_WIDTH"),
    "plot_curves": ("course_lib.teaching.plotting", "plot_curves"),
    "plot_kernels": ("course_lib.teaching.plotting", "plot_kernels"),
    "plot_regression": ("course_lib.teaching.plotting", "plot_regression"),
    "show_heatmaps": ("course_lib.teaching.plotting", "show_heatmaps"),
    "use_book_style": ("course_lib.teaching.plotting", "use_book_style"),
    "plot_history": ("course_lib.teaching.training_plots", "plot_history"),
}


def __getattr__(name: str) -> object:
    """Import a teaching name (``cl.show_heatmaps``, ``cl.diagrams``, ...) on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'course_lib' has no attribute {name!r}")
    import importlib

    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "speculative_generate",
    "SpeculativeStats",
    "next_token_probs",
    "top_p_filter",
    "top_k_filter",
    "sample_next",
    "load_python_lm",
    "RotaryEmbedding",
    "SinkCache",
    "PagedKVCache",
    "Cache",
    "BlockPool",
    "query_positions",
    "repeat_kv",
    "register_kernel",
    "kernel_names",
    "attention_kernel",
    "alibi_mod",
    "ScoreMod",
    "Capabilities",
    "ALiBiKernel",
    "AddNorm",
    "AdditiveAttention",
    "AttentionKernel",
    "AttentionModule",
    "BOOK_STYLE",
    "BahdanauDecoder",
    "BahdanauSeq2Seq",
    "BilinearAttention",
    "COLUMN_WIDTH",
    "CheckpointError",
    "CosineAttention",
    "DataNotFoundError",
    "DecoderLM",
    "DecoderLMBlock",
    "DecoderLMConfig",
    "DecoderLMState",
    "DotProductAttention",
    "FORMAT_VERSION",
    "FlashIO",
    "FlashKernel",
    "KERNELS",
    "KVCache",
    "LM_FORMAT_VERSION",
    "LINEAR_ATTENTION_MODES",
    "LMData",
    "LearnedPositionalEmbedding",
    "LinearAttentionState",
    "LinearKernel",
    "MaskMod",
    "MultiHeadAttention",
    "NWKernelRegression",
    "OnlineSoftmax",
    "PositionWiseFFN",
    "PositionalEncoding",
    "RMSNorm",
    "RNNDecoderState",
    "RNNEncoder",
    "RotaryKernel",
    "Seq2SeqData",
    "Seq2SeqDecoder",
    "Seq2SeqModel",
    "Seq2SeqRNN",
    "Seq2SeqRNNConfig",
    "SlidingWindowCache",
    "SlidingWindowKernel",
    "SparseKernel",
    "SparseMultiHeadAttention",
    "SubwordTokenizer",
    "SwiGLU",
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
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "attend",
    "attention_modules",
    "attention_pool",
    "beam_search",
    "bilinear_scores",
    "bleu",
    "boxcar_kernel",
    "by_device",
    "causal_mask",
    "causal_mod",
    "corpus_bleu",
    "cosine_scores",
    "cross_entropy",
    "data",
    "decode_batch",
    "default_max_len",
    "default_stride",
    "dense_attention",
    "detokenized_bleu",
    "diagrams",
    "dot_product_scores",
    "elu_feature_map",
    "epanechnikov_kernel",
    "evaluate",
    "evaluate_lm",
    "evaluate_loss",
    "exact_match",
    "explicit_kernel",
    "feature_map_kernel",
    "fit_nw_kernel_regression",
    "fixed_attention",
    "fixed_pattern",
    "flash1_io",
    "flash_attention",
    "flash_io",
    "flash_tile_map",
    "fused_attention",
    "fused_kernel",
    "gaussian_kernel",
    "get_kernel",
    "global_state_preserved",
    "glue",
    "greedy_decode",
    "keep_mask",
    "leave_one_out",
    "lengths_to_mask",
    "linear_attention",
    "linear_attention_step",
    "lm_position_losses",
    "load_checkpoint",
    "load_dates",
    "load_english_lm",
    "load_fra_eng",
    "load_fra_eng_subwords",
    "load_lm_checkpoint",
    "masked_cross_entropy",
    "masked_softmax",
    "model_device",
    "nadaraya_watson",
    "nadaraya_watson_attention",
    "num_parameters",
    "online_softmax",
    "padding_mask",
    "padding_mod",
    "parameter_free_self_attention",
    "peak_memory",
    "plot_curves",
    "plot_history",
    "plot_kernels",
    "plot_regression",
    "predict_split",
    "progress",
    "progress_mode",
    "recording_attention",
    "rope_angles",
    "rope_scaling_parameters",
    "rotary_embedding",
    "rotary_frequencies",
    "rotary_permutation",
    "save_checkpoint",
    "save_lm_checkpoint",
    "seeded",
    "sequence_log_prob",
    "sequence_mask",
    "set_seed",
    "show_heatmaps",
    "sinusoidal_table",
    "sliding_window_mod",
    "softmax_attention",
    "softmax_with_keep",
    "sparse",
    "store_attention_weights",
    "strided_attention",
    "strided_pattern",
    "swiglu_hidden_size",
    "train_lm",
    "train_seq2seq",
    "translate",
    "triangular_kernel",
    "try_gpu",
    "use_book_style",
    "valid_lens_to_mask",
    "warmup_lr",
]
