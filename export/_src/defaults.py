"""Each framework's version pin and the engine defaults it applies, in one place.

The exporters name their pin (``Exporter.version``); the importers fill a key
a config leaves out with these defaults, and the rules of thumb
(``search/_src/rules.py``) lay out engines with them, so the three agree.

Sources, at the pinned commits:

* veRL (verl-project/verl@1dda039, ``verl/trainer/config/_generated_ppo_trainer.yaml``
  ``actor_rollout_ref.rollout``): ``tensor_model_parallel_size: 2``,
  ``gpu_memory_utilization: 0.5``, ``max_num_seqs: 256``.
* OpenRLHF (OpenRLHF/OpenRLHF@3c3be62, ``openrlhf/cli/train_ppo_ray.py``):
  ``--vllm.tensor_parallel_size 1``, ``--vllm.gpu_memory_utilization 0.95``; it
  passes no ``max_num_seqs``, so vLLM's own default, 256 (the importers'
  ``engine_max_seqs``), applies.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class EngineDefaults:
  """A framework's rollout engine as it runs when its config says nothing."""

  tp: float
  memory_fraction: float
  max_seqs: float


PINS = {"verl": "verl-project/verl@1dda039", "openrlhf": "OpenRLHF/OpenRLHF@v0.11.0 (3c3be62)",
        "nemo_rl": "NVIDIA-NeMo/RL@7ea279a", "slime": "THUDM/slime@624b824",
        "areal": "inclusionAI/AReaL@4aef98d"}

ENGINE_DEFAULTS = {"verl": EngineDefaults(tp=2.0, memory_fraction=0.5, max_seqs=256.0),
                   "openrlhf": EngineDefaults(tp=1.0, memory_fraction=0.95, max_seqs=256.0)}


def commit(framework: str) -> str:
  """The pinned commit of ``framework`` (``1dda039``)."""
  try:
    return re.findall(r"\b[0-9a-f]{7,40}\b", PINS[framework])[-1]
  except KeyError:
    raise ValueError(f"framework={framework!r} is not one of {tuple(PINS)}") from None
