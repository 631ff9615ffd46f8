"""Checkers for the exercises of chapter 9, sparse attention."""

from __future__ import annotations
