"""Turning a model's logits into text: the seq2seq protocol, greedy and beam search, sampling, and the
language model's generation, in one place (chapters 8 and 12). It reads models through their protocols only."""
