"""Export of a plan to veRL: Hydra overrides and the command that runs them.

Keys of verl-project/verl@1dda039: ``python3 -m verl.trainer.main_ppo`` (the v1
trainer, or with ``trainer.use_v1=False`` the hybrid-engine trainer), or the
experimental ``fully_async_policy`` and ``one_step_off_policy`` recipes; FSDP
or Megatron training, vLLM rollout. Worker keys live in :mod:`export.verl.workers`.
"""

from __future__ import annotations

import math
import shlex

import costmodel as cm
from export._src.base import Exporter
from export._src.common import Concrete
from export._src.common import Scalar
from export._src.common import concrete
from export._src.common import fmt
from export._src.common import shares_rollout
from export._src.common import with_layouts
from export._src.nodes import node_layouts
from export._src.refusals import check_sync
from export.verl import record
from export.verl.workers import actor_keys
from export.verl.workers import critic_keys
from export.verl.workers import reward_keys

VERSION = record.PIN

_ESTIMATOR = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo",
              "reinforce_pp": "reinforce_plus_plus", "rloo": "rloo", "remax": "remax"}

# entry point and the Megatron config name of each trainer
_MODULES = {
    "main": ("verl.trainer.main_ppo", "ppo_megatron_trainer"),
    "fully_async": ("verl.experimental.fully_async_policy.fully_async_main",
                    "fully_async_ppo_megatron_trainer"),
    "one_step_off": ("verl.experimental.one_step_off_policy.main_ppo",
                     "one_step_off_ppo_megatron_trainer"),
}


def trainer_of(overrides: dict[str, Scalar]) -> str:
  """Which trainer runs the overrides: ``main``, ``fully_async`` or ``one_step_off``."""
  if "async_training.staleness_threshold" in overrides:
    return "fully_async"
  if "rollout.nnodes" in overrides:
    return "one_step_off"
  return "main"


def _placed_pools(c: Concrete, cluster: cm.Cluster) -> tuple[dict, bool]:
  """Nodes of each pool veRL places, and whether the reward model has its own pool."""
  fw = "veRL"
  a_pool, r_pool = c.actor_pool, c.rollout_pool
  for role in ("reference", "critic"):
    if c.has(role) and c.role_pool[role] != a_pool:
      raise ValueError(
          f"{fw}: {role} on pool {c.role_pool[role]!r}, apart from the actor's pool {a_pool!r}, "
          "is expressible only in code (resource_pool_spec + Role mapping, "
          "examples/split_placement); the config keys keep it with the actor")
  placed = {a_pool: c.pools[a_pool], r_pool: c.pools[r_pool]}
  rm_pool = c.role_pool.get("reward")
  rm_own = rm_pool is not None and rm_pool != a_pool
  if rm_own:
    if rm_pool == r_pool:
      raise ValueError(f"{fw}: reward model on the rollout pool {r_pool!r} is expressible only in "
                       "code (resource_pool_spec); reward.reward_model.enable_resource_pool gives "
                       "it a pool of its own")
    placed[rm_pool] = c.pools[rm_pool]
  return node_layouts(placed, cluster, fw), rm_own


def to_verl(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, strategy: str = "fsdp",
            version: str = "v1", async_recipe: str = "fully_async",
            dapo_metric: str = "acc") -> dict[str, Scalar | None]:
  """veRL Hydra overrides that run ``plan``.

  Placement: a colocated plan (rollout on the actor's pool) shares the
  trainer's GPUs (v1 ``sync`` mode, or the hybrid engine); a split plan puts
  the rollout on its own ``nnodes x n_gpus_per_node`` (v1 ``separate_async``,
  or with ``version="legacy"`` the ``fully_async_policy`` or
  ``one_step_off_policy`` recipe). The reference and critic live on the
  actor's pool; a reward model, served by vLLM, shares it or has a pool of its
  own (``reward.reward_model.enable_resource_pool``). ``ppo_mini_batch_size``
  is counted in prompts (veRL multiplies it by ``rollout.n``). veRL builds a
  reference worker only when a KL term needs it, so ``actor.use_kl_loss``
  follows ``job.use_reference``.

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job.
    cluster: The cluster.
    strategy: Training backend: ``fsdp``, ``fsdp2`` or ``megatron``.
    version: ``v1`` (``trainer.use_v1=True``, ``trainer.v1.*``) or ``legacy``
      (``trainer.use_v1=False`` with the hybrid engine, or the experimental
      recipes for a split plan).
    async_recipe: For a split plan with ``version="legacy"``: ``fully_async``
      (any staleness, ``async_training.staleness_threshold``; 0 is its
      synchronous pipeline) or ``one_step_off`` (staleness exactly 1).
    dapo_metric: ``algorithm.filter_groups.metric`` for DAPO's group filter
      (``acc`` in veRL's DAPO scripts).

  Returns:
    ``{dotted key: value}``; pass it to :func:`verl_command`. The model, data
    and reward-function paths are the user's to add.

  Raises:
    ValueError: naming the setting when veRL cannot run the plan: TP/PP/EP
      with FSDP, ZeRO-2/3 with Megatron, selective recompute with FSDP, a
      Megatron critic whose value micro-batch differs from its training one,
      a reference or critic away from the actor's pool or a reward model on
      the rollout pool, pools that are not uniform per node, a split
      synchronous plan with the v1 trainer, a v1 asynchronous plan without
      partial rollout, staleness other than 1 with ``one_step_off``, DAPO
      where its group filter does not run, a reward model on the trainer's
      GPUs in an asynchronous trainer, batches that do not split over the
      data-parallel ranks (the rule table's ``verl`` set), the CPU optimizer
      on FSDP1 or on Megatron without the distributed optimizer, an FSDP
      reference whose parameters are not on the host, a weight sync other
      than the trainer's, and every setting :func:`check_supported` names.

  References:
    verl-project/verl@1dda039 ``verl/trainer/config/_generated_ppo_trainer.yaml``
    and ``_generated_ppo_megatron_trainer.yaml``; ``verl/trainer/ppo/v1/``
    (``trainer_separate_async.py``, ``replay_buffer.py``,
    ``trainer_base.py``); ``verl/experimental/fully_async_policy/``.
  """
  for name, value, allowed in (("strategy", strategy, ("fsdp", "fsdp2", "megatron")),
                               ("version", version, ("v1", "legacy")),
                               ("async_recipe", async_recipe, ("fully_async", "one_step_off"))):
    if value not in allowed:
      raise ValueError(f"to_verl: {name}={value!r} is not one of {allowed}")
  split = plan.role("actor") is not None and plan.role("actor").pool != plan.rollout_pool
  supports = {"etp"} if strategy == "megatron" else set()
  if split and version == "legacy" and async_recipe == "fully_async":
    supports |= {"staleness_threshold", "require_batches"}
  c = concrete(plan, job, cluster, "veRL", rule_set="verl", supports=frozenset(supports))
  nodes, rm_own = _placed_pools(c, cluster)
  o: dict[str, Scalar | None] = {}
  o["trainer.nnodes"], o["trainer.n_gpus_per_node"] = nodes[c.actor_pool]
  o["data.train_batch_size"] = c.prompts
  o["data.max_prompt_length"] = c.prompt_len
  o["data.max_response_length"] = c.max_response
  o["algorithm.adv_estimator"] = _ESTIMATOR[c.algorithm]
  o["actor_rollout_ref.actor.use_kl_loss"] = c.use_reference
  if not c.use_reference:
    o["algorithm.use_kl_in_reward"] = False
  mini = actor_keys(o, c, strategy)

  e = c.engine
  pre = "actor_rollout_ref.rollout"
  o[f"{pre}.name"] = "vllm"
  o[f"{pre}.n"] = c.n
  o[f"{pre}.tensor_model_parallel_size"] = e.tp
  if e.pp > 1:
    o[f"{pre}.pipeline_model_parallel_size"] = e.pp
  if e.ep > 1:  # vLLM's expert parallel group is TP x DP (rollout.data_parallel_size = 1)
    o[f"{pre}.expert_parallel_size"] = e.ep
  o[f"{pre}.gpu_memory_utilization"] = e.memory_fraction
  o[f"{pre}.max_num_seqs"] = e.max_seqs
  o[f"{pre}.enable_prefix_caching"] = e.prefix_caching
  o[f"{pre}.enforce_eager"] = not e.cuda_graphs
  o[f"{pre}.log_prob_micro_batch_size_per_gpu"] = c.infer["actor"].micro_batch
  # Colocated: the "naive" checkpoint engine loads per-tensor params in place; apart: "nccl"
  # broadcasts buckets (verl/checkpoint_engine/base.py).
  check_sync("veRL", c, "per_tensor" if c.colocated else "bucketed",
             "in-place per-tensor loads (checkpoint_engine.backend naive)" if c.colocated else
             "NCCL buckets (checkpoint_engine.backend nccl)")

  if c.has("critic"):
    critic_keys(o, c, strategy)
  if c.has("reward"):
    reward_keys(o, c, nodes, rm_own)
  _placement(o, c, nodes, version, async_recipe, mini)
  if c.algorithm == "dapo":
    _dapo(o, c, dapo_metric, rm_own)
  return o


def _dapo(o: dict, c: Concrete, metric: str, rm_own: bool) -> None:
  """DAPO's group filter: the v1 trainer and the fully asynchronous recipe run it."""
  trainer = "v1" if o.get("trainer.use_v1") else trainer_of(o)
  if trainer not in ("v1", "fully_async"):
    raise ValueError(f"veRL: algorithm='dapo': algorithm.filter_groups is read by the v1 trainer "
                     f"and the fully_async recipe only, not by the {trainer} trainer; use "
                     "version='v1' or async_recipe='fully_async'")
  if trainer == "v1" and c.has("reward") and not rm_own:
    raise ValueError("veRL: algorithm='dapo' with the reward model on the trainer's GPUs: the v1 "
                     "trainer needs the reward at sampling time for algorithm.filter_groups "
                     "(trainer_base.py); give the reward model a pool of its own")
  o["algorithm.filter_groups.enable"] = True
  o["algorithm.filter_groups.metric"] = metric
  # The v1 replay buffer and the fully_async recipe stream groups one prompt at a time
  # (gen_batch_size 1) and refill filtered groups, so the oversampling factor has no key.


def _placement(o: dict, c: Concrete, nodes: dict, version: str, async_recipe: str,
               mini: int) -> None:
  """The trainer mode: shared GPUs, or the rollout's own nodes and the async settings."""
  fw = "veRL"
  k = c.staleness
  if c.has("reward") and c.role_pool["reward"] == c.actor_pool and not c.colocated:
    raise ValueError(f"{fw}: reward model on the trainer's pool {c.actor_pool!r} with the rollout "
                     "on its own pool: the asynchronous trainers need "
                     "reward.reward_model.enable_resource_pool=True (the standalone rollout never "
                     "pauses); give the reward model a pool of its own")
  if version == "v1":
    o["trainer.use_v1"] = True
    if c.colocated:
      o["trainer.v1.trainer_mode"] = "sync"
      return
    if k == 0:
      raise ValueError(
          f"{fw}: trainer.v1.trainer_mode: a synchronous plan (staleness=0) with the rollout on "
          f"its own pool {c.rollout_pool!r} has no v1 mode (sync and colocate_async keep the "
          "rollout on the trainer's GPUs, separate_async is asynchronous); use version='legacy' "
          "(fully_async_policy with staleness_threshold=0)")
    if not c.partial_rollout:
      raise ValueError(
          f"{fw}: mode.partial_rollout=False: the v1 separate_async trainer always resumes "
          "aborted rollouts with newer weights (partial rollout); use version='legacy' "
          "(async_training.partial_rollout=False) or a plan with partial_rollout=True")
    o["trainer.v1.trainer_mode"] = "separate_async"
    o["actor_rollout_ref.rollout.nnodes"], o["actor_rollout_ref.rollout.n_gpus_per_node"] = (
        nodes[c.rollout_pool])
    o["actor_rollout_ref.rollout.checkpoint_engine.backend"] = "nccl"
    # data.train_batch_size = parameter_sync_step x ppo_mini_batch_size
    o["trainer.v1.separate_async.parameter_sync_step"] = c.prompts // mini
    # replay_buffer.py drops a trajectory started at step s when g - s + 1 > threshold,
    # so a staleness of k steps needs a threshold of k + 1.
    o["trainer.v1.sampler.max_off_policy_threshold"] = k + 1
    o["trainer.v1.sampler.max_off_policy_strategy"] = "wait"
    return
  o["trainer.use_v1"] = False
  o["actor_rollout_ref.hybrid_engine"] = c.colocated
  if c.colocated:
    return
  o["rollout.nnodes"], o["rollout.n_gpus_per_node"] = nodes[c.rollout_pool]
  if async_recipe == "one_step_off":
    if k != 1:
      raise ValueError(f"{fw}: staleness={k}: the one_step_off_policy recipe runs exactly one "
                       "step off-policy; use async_recipe='fully_async' or staleness=1")
    if c.partial_rollout:
      raise ValueError(f"{fw}: partial_rollout=True: the one_step_off_policy recipe has no "
                       "partial rollout; use async_recipe='fully_async'")
    return
  # fully_async_rollouter.py asserts train_batch_size == 0 and gen_batch_size == 1: the
  # rollouter streams prompts, a step is trigger_parameter_sync_step x require_batches
  # mini-batches, and total_rollout_steps null runs the whole dataset (trainer.total_epochs).
  o["data.train_batch_size"] = 0
  o["data.gen_batch_size"] = 1
  o["rollout.total_rollout_steps"] = None
  o["async_training.staleness_threshold"] = _threshold(c.mode)
  # A trainer call takes require_batches mini-batches; a plan without streaming takes the
  # step's whole batch in one call (require_batches = mini_batches, one call per sync).
  calls = c.mode.require_batches or c.mini_batches
  o["async_training.trigger_parameter_sync_step"] = c.mini_batches // calls
  o["async_training.require_batches"] = calls
  o["async_training.partial_rollout"] = c.partial_rollout


def _threshold(mode) -> float:
  """``async_training.staleness_threshold``: the plan's threshold, else its staleness.

  A threshold needs a staleness of ``ceil(threshold)`` steps (the import reads one key)."""
  t = mode.staleness_threshold
  if t is None:
    return float(mode.staleness)
  if float(t).is_integer() or mode.staleness != max(1, math.ceil(t)):
    raise ValueError(f"veRL: mode.staleness_threshold={t!r} with staleness={mode.staleness}: "
                     "async_training.staleness_threshold is one key; give a fractional "
                     f"threshold with staleness=ceil(threshold) ({max(1, math.ceil(t))}), or a "
                     "whole number of steps as staleness alone")
  return float(t)


def verl_command(overrides: dict[str, Scalar | None], module: str | None = None,
                 config_name: str | None = None) -> str:
  """The shell command ``python3 -m <module> key=value ...`` for veRL overrides.

  The entry point follows the overrides (:func:`trainer_of`); a Megatron
  actor adds the trainer's Megatron ``--config-name``. Arguments are quoted
  with :func:`shlex.join`; ``None`` is written ``null``.
  """
  default_module, megatron_config = _MODULES[trainer_of(overrides)]
  argv = ["python3", "-m", module or default_module]
  if config_name is None and overrides.get("actor_rollout_ref.actor.strategy") == "megatron":
    config_name = megatron_config
  if config_name:
    argv.append(f"--config-name={config_name}")
  argv += [f"{k}={fmt(v)}" for k, v in overrides.items()]
  return shlex.join(argv)


def as_run(plan: cm.Plan, strategy: str = "fsdp", **_) -> cm.Plan:
  """The plan as veRL runs it: per-tensor loads colocated, NCCL buckets apart, and an FSDP
  reference's parameters on the host (``forward_only``)."""
  ref = {"reference": {"offload": 1.0, "swap": 0.0}} if strategy != "megatron" else {}
  return with_layouts(plan, ref, "per_tensor" if shares_rollout(plan) else "bucketed")


EXPORTER = Exporter(name=record.NAME, framework=record.FRAMEWORK, version=VERSION,
                    to_config=to_verl,
                    render_settings=verl_command, kind="command", adapt=as_run,
                    forces={
                        "engine.sync_backend": "verl/checkpoint_engine/base.py: naive in-place "
                        "per-tensor loads colocated, nccl buckets apart",
                        "reference.offload": "the FSDP reference is forward_only, "
                        "engine/fsdp/transformer_impl.py CPUOffload(offload_params=True)",
                        "reference.swap": "the FSDP reference is forward_only, its parameters "
                        "stay on the host (engine/fsdp/transformer_impl.py)"})
