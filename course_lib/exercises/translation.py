"""Checkers for the exercises of chapter 8.1, translating English to French."""

from __future__ import annotations
