"""NeMo-RL: its pin, search rules and command-line names."""

from __future__ import annotations

from export._src.record import BF16_ROLLOUT
from export._src.record import NO_DP_ATTENTION
from export._src.record import NO_SELECTIVE
from export._src.record import NO_VPP
from export._src.record import SearchRules

NAME = "nemo_rl"
FRAMEWORK = "NeMo-RL"
PIN = "NVIDIA-NeMo/RL@7ea279a"
FROM_HELP = "NeMo-RL run to start from: its YAML config."
# Policy workers hold the actor, reference and critic; DTensor or Megatron.
SEARCH = SearchRules(
    families=("colocated", "split", "split_async", "split_async_partial"),
    rule_sets=("zero3", "batch", "nemo_rl"), nodes="whole",
    options=NO_SELECTIVE + NO_VPP + NO_DP_ATTENTION + BF16_ROLLOUT,
    ties=(("critic.mb_infer", "critic.mb_train"), ("critic.zero", "actor.zero")),
    note="NeMo-RL: whole nodes per role on several nodes, one value micro-batch")
