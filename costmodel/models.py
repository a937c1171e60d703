"""Preset model architectures and their published parameter counts.

>>> from costmodel import models
>>> models.get("Llama-3.1-8B").total_params
8030261248
"""

from costmodel._src.specs.model_presets import get
from costmodel._src.specs.model_presets import names
from costmodel._src.specs.model_presets import published_params

__all__ = ("get", "names", "published_params")
