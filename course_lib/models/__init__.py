"""The models: position encodings (chapter 6), the Transformer (chapter 7), the RNN baselines (chapter 4),
the decoder-only language model (chapter 11) and its Hugging Face conversion. Each builds its attention
from the kernel its config names (:mod:`course_lib.attention.registry`)."""
