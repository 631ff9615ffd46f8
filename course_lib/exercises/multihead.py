"""Checkers for the exercises of chapter 5, multi-head attention."""

from __future__ import annotations
