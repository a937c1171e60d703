"""Accelerator presets.

>>> from costmodel import hardware
>>> hardware.get("H100").peak_flops_per_s
989000000000000.0
"""

from costmodel._src.specs.hardware import get
from costmodel._src.specs.hardware import names

__all__ = ("get", "names")
