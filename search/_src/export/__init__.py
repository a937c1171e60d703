"""Exports of a concrete plan to the settings of the frameworks that run it.

Three targets, each with the keys its own configuration files define
(volcengine/verl@b178a3c and verl-project/verl@1dda039
``verl/trainer/config``; OpenRLHF ``openrlhf/cli/train_ppo_ray.py``;
NVIDIA-NeMo/RL ``examples/configs/grpo_math_1B.yaml``):

* veRL: Hydra overrides for ``python3 -m verl.trainer.main_ppo`` (or the
  asynchronous recipes), FSDP or Megatron training, vLLM rollout, the v1
  trainer or the older disaggregated recipes.
* OpenRLHF: the argv of ``python3 -m openrlhf.cli.train_ppo_ray``, in the
  dotted flag names of v0.10.2 and later or the underscore names of
  v0.9.x-v0.10.1.
* NeMo-RL: a nested dict shaped like ``examples/configs/grpo_math_1B.yaml``
  and a small YAML writer for it.

Only what a framework's configuration can express is exported. Anything else
(a pool that is not ``nnodes x n_gpus_per_node`` with the same GPUs on every
node, a parallel degree the training backend lacks, a role placed where the
config keys cannot put it, a staleness the recipe cannot bound) raises
``ValueError`` naming the setting and why.

Modules: ``common`` (a plan read as integers, pools as nodes, shared checks),
``verl``, ``openrlhf``, ``nemo_rl`` and ``yaml``; the public module is
:mod:`search.export`.
"""

from search._src.export.common import require_int as require_int
from search._src.export.nemo_rl import to_nemo_rl as to_nemo_rl
from search._src.export.openrlhf import openrlhf_command as openrlhf_command
from search._src.export.openrlhf import to_openrlhf as to_openrlhf
from search._src.export.verl import to_verl as to_verl
from search._src.export.verl import verl_command as verl_command
from search._src.export.yaml import to_yaml as to_yaml
