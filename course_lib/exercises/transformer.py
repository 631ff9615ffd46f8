"""Checkers for the exercises of chapter 7, the Transformer architecture."""

from __future__ import annotations
