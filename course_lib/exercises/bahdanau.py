"""Checkers for the exercises of chapter 4, Bahdanau attention."""

from __future__ import annotations
