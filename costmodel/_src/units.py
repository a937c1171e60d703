"""Unit constants shared by the whole library."""

from __future__ import annotations

TERA = 1e12
GIGA = 1e9
# Memory capacities: the marketed "80 GB", "141 GB" parts expose about that many
# GiB (nvidia-smi: 81,559 MiB on H100, 143,771 MiB on H200, ~179 GB on B200).
GIB = float(2**30)
