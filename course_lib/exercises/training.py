"""Checkers for the exercises of chapter 8, training and inference on the dates task."""

from __future__ import annotations
