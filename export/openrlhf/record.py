"""OpenRLHF: its pin, engine defaults, search rules and command-line names.

Engine defaults, from ``openrlhf/cli/train_ppo_ray.py`` at the pin:
``--vllm.tensor_parallel_size 1``, ``--vllm.gpu_memory_utilization 0.95``; it passes
no ``max_num_seqs``, so vLLM's own default, 256, applies.
"""

from __future__ import annotations

import costmodel as cm
from export._src.record import BF16_ROLLOUT
from export._src.record import DEGREES
from export._src.record import NO_DP_ATTENTION
from export._src.record import NO_ETP
from export._src.record import NO_SELECTIVE
from export._src.record import EngineDefaults
from export._src.record import SearchRules
from export._src.record import tie

NAME = "openrlhf"
FRAMEWORK = "OpenRLHF"
PIN = "OpenRLHF/OpenRLHF@v0.11.0 (3c3be62)"
ENGINE_DEFAULTS = EngineDefaults(tp=1.0, memory_fraction=0.95, max_seqs=256.0)
FROM_HELP = "OpenRLHF run to start from: a file holding the train_ppo_ray command line."
# DeepSpeed: no pipeline, one --ds.* setting and one micro-batch for every model; vLLM
# engines without PP or EP and vLLM's own max_num_seqs. A critic on the actor's GPUs needs
# --train.colocate_all, which takes the engines along in a synchronous run: no
# synchronous split with a critic.
SEARCH = SearchRules(
    families=tuple(p.name for p in cm.placements()),
    critic_families=("colocated", "split_async", "split_async_partial", "split3"),
    rule_sets=("zero3", "batch", "openrlhf"), nodes="uniform",
    options=(("max_pp", 1), ("max_ep", 1), ("engine_max_pp", 1), ("engine_ep", (0,)),
             ("max_seqs", (int(ENGINE_DEFAULTS.max_seqs),))) + NO_SELECTIVE + NO_DP_ATTENTION
    + NO_ETP + BF16_ROLLOUT,
    ties=tie(("critic",), DEGREES + ("zero", "recompute", "offload", "mb_train", "mb_infer"))
    + tie(("reward",), DEGREES + ("mb_infer",)),
    export_options=({"vllm_default_max_seqs": True},),
    note="OpenRLHF: DeepSpeed without PP, one --ds.* setting for every model, vLLM's default "
    "max_num_seqs (256)")
