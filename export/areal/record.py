"""AReaL: its pin, engine defaults, search rules and command-line names.

Engine defaults, from ``areal/api/cli_args.py`` at the pin: ``SGLangConfig``
``mem_fraction_static: 0.9`` (``vLLMConfig.gpu_memory_utilization`` is 0.9 too) and
rollout TP 1 (an allocation string without ``t``); ``max_running_requests`` is None
there (SGLang sizes it from memory): 1,024 concurrent sequences are assumed.
"""

from __future__ import annotations

from export._src.record import BF16_ROLLOUT
from export._src.record import NO_ETP
from export._src.record import NO_SELECTIVE
from export._src.record import EngineDefaults
from export._src.record import SearchRules
from export._src.record import tie

NAME = "areal"
FRAMEWORK = "AReaL"
PIN = "inclusionAI/AReaL@4aef98d"
ENGINE_DEFAULTS = EngineDefaults(tp=1.0, memory_fraction=0.9, max_seqs=1024.0)
FROM_HELP = "AReaL run to start from: its YAML experiment config."
# The critic's inference reuses the actor's workers; staleness with interruptible
# rollouts. Its megatron backend has no CPU optimizer (only the fsdp backend's
# offload_params).
SEARCH = SearchRules(
    families=("split", "split_async_partial"),
    rule_sets=("zero3", "batch", "areal"), nodes="uniform",
    options=NO_SELECTIVE + (("offload", (0,)),) + NO_ETP + BF16_ROLLOUT,
    ties=tie(("critic",), ("tp", "pp", "vpp")) + (("actor.mb_infer", "actor.mb_train"),
                                                   ("critic.mb_infer", "critic.mb_train")),
    note="AReaL: separate rollout pool, partial rollouts when asynchronous, one mb_spec per "
    "engine")
