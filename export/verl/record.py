"""veRL: its pin, engine defaults, search rules and command-line names.

Engine defaults, from ``verl/trainer/config/_generated_ppo_trainer.yaml``
``actor_rollout_ref.rollout`` at the pin: ``tensor_model_parallel_size: 2``,
``gpu_memory_utilization: 0.5``, ``max_num_seqs: 256``; the importer fills a key a
config leaves out with them and the rules of thumb lay out veRL's engines with them.
"""

from __future__ import annotations

from export._src.record import BF16_ROLLOUT
from export._src.record import NO_DP_ATTENTION
from export._src.record import NO_SELECTIVE
from export._src.record import EngineDefaults
from export._src.record import SearchRules

NAME = "verl"
FRAMEWORK = "veRL"
PIN = "verl-project/verl@1dda039"
ENGINE_DEFAULTS = EngineDefaults(tp=2.0, memory_fraction=0.5, max_seqs=256.0)
FROM_HELP = ("veRL run to start from: overrides (key=value per line), a launch script (.sh) "
             "or a YAML config.")
# veRL's default FSDP strategy; v1 trainer for colocated and fully asynchronous plans,
# the legacy recipes for the split synchronous and one-step-off plans (exporter.py).
SEARCH = SearchRules(
    families=("colocated", "split", "split_async", "split_async_partial"),
    rule_sets=("zero3", "batch", "verl"), nodes="uniform",
    options=(("max_tp", 1), ("max_pp", 1), ("max_ep", 1), ("zero_stages", (3,)))
    + NO_SELECTIVE + NO_DP_ATTENTION + BF16_ROLLOUT,
    # FSDP2 for the CPU optimizer (fsdp_config.offload_policy)
    export_options=tuple({**v, **s} for s in ({}, {"strategy": "fsdp2"}) for v in (
        {}, {"version": "legacy"}, {"version": "legacy", "async_recipe": "one_step_off"})),
    note="veRL FSDP: ZeRO-3 without TP/PP/EP, full or no checkpointing")
