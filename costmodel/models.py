"""Model architectures: presets with published parameter counts, and Hugging Face ids.

``get`` takes a preset name or a Hugging Face id (the table of
``costmodel/data/hf_models.yaml``, fine-tune names included).

>>> from costmodel import models
>>> models.get("Llama-3.1-8B").total_params
8030261248
>>> models.from_hf_id("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B").total_params
7615616512
"""

from costmodel._src.specs.hf_models import from_hf_id
from costmodel._src.specs.hf_models import get
from costmodel._src.specs.hf_models import ids as hf_ids
from costmodel._src.specs.hf_models import not_modelled as hf_not_modelled
from costmodel._src.specs.model_presets import names
from costmodel._src.specs.model_presets import published_params

__all__ = ("from_hf_id", "get", "hf_ids", "hf_not_modelled", "names", "published_params")
