"""Checkers for the exercises of chapter 6, positional encoding."""

from __future__ import annotations
