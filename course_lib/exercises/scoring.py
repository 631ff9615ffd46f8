"""Checkers for the exercises of the scoring chapter."""

from __future__ import annotations
