"""The training loss, the training loops (sequence-to-sequence and language models), evaluation, checkpoints and
``torchrun``."""
