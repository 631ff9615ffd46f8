"""Checkers for the exercises of the attention_pooling chapter."""

from __future__ import annotations
