"""Checkers for the exercises of the nadaraya_watson chapter."""

from __future__ import annotations
