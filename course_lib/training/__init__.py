"""Training loops (sequence-to-sequence and language models), evaluation, checkpoints and ``torchrun``."""
