"""Export of a plan to veRL: Hydra overrides and the command that runs them.

Keys as defined in volcengine/verl@b178a3c and verl-project/verl@1dda039
``verl/trainer/config``: ``python3 -m verl.trainer.main_ppo`` (or the
asynchronous recipes), FSDP or Megatron training, vLLM rollout, the v1
trainer or the older disaggregated recipes.
"""

from __future__ import annotations

import math
import shlex

import costmodel as cm
from export._src.base import Exporter
from export._src.common import Concrete
from export._src.common import Layout
from export._src.common import Scalar
from export._src.common import check_batch
from export._src.common import check_recompute
from export._src.common import concrete
from export._src.common import fmt
from export._src.common import node_layouts
from export._src.common import refuse_degrees
from export._src.common import same_degrees

_RECOMPUTE_NAMES = ("none", "selective", "full")

_VERL_ESTIMATOR = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo",
                   "reinforce_pp": "reinforce_plus_plus", "rloo": "rloo", "remax": "remax"}

_VERL_MODULES = {
    "main": ("verl.trainer.main_ppo", "ppo_megatron_trainer"),
    "fully_async": ("verl.experimental.fully_async_policy.fully_async_main",
                    "fully_async_ppo_megatron_trainer"),
    "one_step_off": ("verl.experimental.one_step_off_policy.main_ppo",
                     "one_step_off_ppo_megatron_trainer"),
}

VERSION = "verl-project/verl@1dda039"


def _verl_engine_keys(o: dict, prefix: str, lay: Layout, strategy: str, role: str,
                      train: bool) -> None:
  """Parallel, offload and recompute keys of one veRL worker config.

  ``prefix`` is the worker's config node (``actor_rollout_ref.actor``,
  ``critic``, ...). FSDP offers Ulysses sequence parallelism only; Megatron
  offers TP, PP (interleaved), CP and EP and shards optimizer state only.
  """
  fw = f"veRL ({strategy})"
  if lay.vpp > 1 and lay.pp == 1:
    raise ValueError(f"{fw}: {role}.vpp={lay.vpp} needs pp > 1")
  if strategy == "megatron":
    m = f"{prefix}.megatron"
    o[f"{m}.tensor_model_parallel_size"] = lay.tp
    o[f"{m}.pipeline_model_parallel_size"] = lay.pp
    if lay.vpp > 1:
      o[f"{m}.virtual_pipeline_model_parallel_size"] = lay.vpp
    o[f"{m}.context_parallel_size"] = lay.cp
    o[f"{m}.expert_model_parallel_size"] = lay.ep
    if train:
      o[f"{m}.sequence_parallel"] = lay.sequence_parallel_on
      if lay.zero_stage > 1:
        raise ValueError(f"{fw}: {role}.train.zero_stage={lay.zero_stage}: veRL's Megatron "
                         "workers shard only optimizer state (use_distributed_optimizer, ZeRO-1);"
                         " use zero_stage 0 or 1, or strategy='fsdp'")
      o[f"{m}.use_distributed_optimizer"] = lay.zero_stage == 1
      o[f"{m}.param_offload"] = lay.offload
      o[f"{m}.grad_offload"] = lay.offload
      o[f"{m}.optimizer_offload"] = lay.offload
      if lay.recompute:
        t = f"{m}.override_transformer_config"
        o[f"{t}.recompute_granularity"] = _RECOMPUTE_NAMES[lay.recompute]
        if lay.recompute == 2:
          o[f"{t}.recompute_method"] = "uniform"
          o[f"{t}.recompute_num_layers"] = 1
    else:
      o[f"{m}.param_offload"] = lay.offload
    return
  refuse_degrees(fw, f"{role}.{'train' if train else 'infer'}", lay, ("tp", "pp", "ep"),
                 "FSDP training has no tensor, pipeline or expert parallelism (only Ulysses "
                 "sequence parallelism, cp); use strategy='megatron'")
  o[f"{prefix}.ulysses_sequence_parallel_size"] = lay.cp


def _verl_fsdp_state(o: dict, fsdp: str, model: str, lay: Layout, role: str,
                     strategy: str) -> None:
  """FSDP sharding, offload and checkpointing keys of a training role."""
  fw = f"veRL ({strategy})"
  if lay.zero_stage == 1:
    raise ValueError(f"{fw}: {role}.train.zero_stage=1: FSDP shards parameters, gradients and "
                     "optimizer state together (fsdp_size) or nothing; use zero_stage 0, 2 or 3")
  if lay.zero_stage == 0:
    o[f"{fsdp}.fsdp_size"] = 1
  elif lay.zero_stage == 2:
    o[f"{fsdp}.reshard_after_forward"] = False
  o[f"{fsdp}.param_offload"] = lay.offload
  o[f"{fsdp}.optimizer_offload"] = lay.offload
  check_recompute(fw, f"{role}.train", lay, "FSDP's enable_gradient_checkpointing")
  o[f"{model}.enable_gradient_checkpointing"] = lay.recompute == 2


def to_verl(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, strategy: str = "fsdp",
            version: str = "v1", async_recipe: str = "fully_async") -> dict[str, Scalar]:
  """veRL Hydra overrides that run ``plan``.

  Placement: a colocated plan (rollout on the actor's pool) is veRL's hybrid
  engine; a split plan puts the rollout on its own ``nnodes x n_gpus_per_node``
  (the v1 trainer's ``separate_async`` mode, or with ``version="legacy"`` the
  ``fully_async_policy`` or ``one_step_off_policy`` recipe). The reference and
  critic always live on the actor's pool; a reward model may have its own pool
  (``reward_model.enable_resource_pool``). ``ppo_mini_batch_size`` is counted
  in prompts (veRL multiplies it by ``rollout.n``). veRL builds a reference
  worker only when a KL term needs it, so ``actor.use_kl_loss`` follows
  ``job.use_reference``.

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job.
    cluster: The cluster.
    strategy: Training backend: ``fsdp``, ``fsdp2`` or ``megatron``.
    version: ``v1`` (the v1 trainer: ``trainer.use_v1``, ``trainer.v1.*``) or
      ``legacy`` (``actor_rollout_ref.hybrid_engine``, top-level ``rollout.*``
      and ``async_training.*`` of the experimental recipes).
    async_recipe: For a split plan with ``version="legacy"``: ``fully_async``
      (any staleness, ``async_training.staleness_threshold``; 0 is its
      synchronous pipeline) or ``one_step_off`` (staleness exactly 1).

  Returns:
    ``{dotted key: value}``; pass it to :func:`verl_command`.

  Raises:
    ValueError: naming the setting when veRL's configuration cannot express
      the plan: TP/PP/EP with FSDP, ZeRO-2/3 with Megatron, selective
      recompute with FSDP, a reference or critic away from the actor's pool or
      a reward model on the rollout pool (only through code:
      ``resource_pool_spec``), pools that are not uniform per node, a split
      synchronous plan with the v1 trainer, a v1 asynchronous plan without
      partial rollout, staleness other than 1 with ``one_step_off``,
      batches that do not split over the data-parallel ranks.

  Example:
    >>> o = to_verl(plan, job, cluster)  # doctest: +SKIP
    >>> print(verl_command(o))  # doctest: +SKIP

  References:
    volcengine/verl@b178a3c ``verl/trainer/config/ppo_trainer.yaml`` and
    ``ppo_megatron_trainer.yaml``; verl-project/verl@1dda039 (v1 trainer);
    ``docs/advance/fully_async.md``.
  """
  if strategy not in ("fsdp", "fsdp2", "megatron"):
    raise ValueError(f"to_verl: strategy={strategy!r} is not one of ('fsdp', 'fsdp2', 'megatron')")
  if version not in ("v1", "legacy"):
    raise ValueError(f"to_verl: version={version!r} is not one of ('v1', 'legacy')")
  if async_recipe not in ("fully_async", "one_step_off"):
    raise ValueError(f"to_verl: async_recipe={async_recipe!r} is not one of "
                     "('fully_async', 'one_step_off')")
  fw = "veRL"
  c = concrete(plan, job, cluster, fw)
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
                       "code (resource_pool_spec); reward_model.enable_resource_pool gives it a "
                       "pool of its own")
    placed[rm_pool] = c.pools[rm_pool]
  nodes = node_layouts(placed, cluster, fw)

  o: dict[str, Scalar] = {}
  o["trainer.nnodes"], o["trainer.n_gpus_per_node"] = nodes[a_pool]
  o["data.train_batch_size"] = c.prompts
  o["data.max_prompt_length"] = c.prompt_len
  o["data.max_response_length"] = c.max_response
  o["algorithm.adv_estimator"] = _VERL_ESTIMATOR[c.algorithm]
  if c.algorithm == "dapo":
    o["algorithm.filter_groups.enable"] = True
    if c.oversample > 1 and c.colocated:  # the asynchronous recipes stream (gen_batch_size=1)
      o["data.gen_batch_size"] = math.ceil(c.prompts * c.oversample - 1e-6)
  o["actor_rollout_ref.actor.use_kl_loss"] = c.use_reference
  if not c.use_reference:
    o["algorithm.use_kl_in_reward"] = False

  # Actor (training, and old log-probs with the same sharding).
  actor = c.train["actor"]
  same_degrees(fw, "actor", actor, c.infer["actor"],
               "veRL computes old log-probs with the actor's training layout")
  mini = c.mini_batch_prompts("actor_rollout_ref.actor.ppo_mini_batch_size", fw)
  pre = "actor_rollout_ref.actor"
  o[f"{pre}.strategy"] = strategy
  o[f"{pre}.ppo_mini_batch_size"] = mini
  o[f"{pre}.ppo_micro_batch_size_per_gpu"] = actor.micro_batch
  o[f"{pre}.ppo_epochs"] = c.ppo_epochs
  _verl_engine_keys(o, pre, actor, strategy, "actor", train=True)
  if strategy != "megatron":
    _verl_fsdp_state(o, f"{pre}.fsdp_config", "actor_rollout_ref.model", actor, "actor", strategy)
  dp = c.pools[a_pool] // (actor.model_parallel if strategy == "megatron" else actor.cp)
  check_batch(fw, "actor_rollout_ref.actor.ppo_mini_batch_size", mini * c.n, dp,
              actor.micro_batch, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")

  if c.has("reference"):
    ref = c.infer["reference"]
    pre = "actor_rollout_ref.ref"
    o[f"{pre}.log_prob_micro_batch_size_per_gpu"] = ref.micro_batch
    _verl_engine_keys(o, pre, ref, strategy, "reference", train=False)
    if strategy != "megatron":
      o[f"{pre}.fsdp_config.param_offload"] = ref.offload

  # Rollout engines.
  e = c.engine
  pre = "actor_rollout_ref.rollout"
  o[f"{pre}.name"] = "vllm"
  o[f"{pre}.n"] = c.n
  o[f"{pre}.tensor_model_parallel_size"] = e.tp
  if e.pp > 1:
    o[f"{pre}.pipeline_model_parallel_size"] = e.pp
  if e.ep > 1:
    o[f"{pre}.expert_parallel_size"] = e.ep
  o[f"{pre}.gpu_memory_utilization"] = e.memory_fraction
  o[f"{pre}.max_num_seqs"] = e.max_seqs
  o[f"{pre}.enable_prefix_caching"] = e.prefix_caching
  o[f"{pre}.log_prob_micro_batch_size_per_gpu"] = c.infer["actor"].micro_batch

  if c.has("critic"):
    critic = c.train["critic"]
    same_degrees(fw, "critic", critic, c.infer["critic"],
                 "veRL computes values with the critic's training layout")
    o["critic.strategy"] = strategy
    o["critic.ppo_micro_batch_size_per_gpu"] = critic.micro_batch
    o["critic.forward_micro_batch_size_per_gpu"] = c.infer["critic"].micro_batch
    _verl_engine_keys(o, "critic", critic, strategy, "critic", train=True)
    if strategy != "megatron":
      _verl_fsdp_state(o, "critic.model.fsdp_config", "critic.model", critic, "critic", strategy)
    cdp = c.pools[a_pool] // (critic.model_parallel if strategy == "megatron" else critic.cp)
    check_batch(fw, "critic.ppo_mini_batch_size", mini * c.n, cdp, critic.micro_batch,
                "critic.ppo_micro_batch_size_per_gpu")

  if c.has("reward"):
    rm = c.infer["reward"]
    o["reward_model.enable"] = True
    o["reward_model.strategy"] = strategy
    o["reward_model.micro_batch_size_per_gpu"] = rm.micro_batch
    _verl_engine_keys(o, "reward_model", rm, strategy, "reward", train=False)
    if strategy != "megatron":
      o["reward_model.model.fsdp_config.param_offload"] = rm.offload
    o["reward_model.enable_resource_pool"] = rm_own
    if rm_own:
      o["reward_model.nnodes"], o["reward_model.n_gpus_per_node"] = nodes[rm_pool]

  _verl_placement(o, c, nodes, version, async_recipe, mini)
  return o


def _verl_placement(o: dict, c: Concrete, nodes: dict, version: str, async_recipe: str,
                    mini: int) -> None:
  """Hybrid engine, or the rollout's own nodes and the asynchronous settings."""
  fw = "veRL"
  k = c.staleness
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
    o["trainer.v1.sampler.max_off_policy_threshold"] = k
    o["trainer.v1.sampler.max_off_policy_strategy"] = "wait"
    return
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
  o["async_training.staleness_threshold"] = float(k)
  o["async_training.trigger_parameter_sync_step"] = c.prompts // mini
  o["async_training.require_batches"] = 1
  o["async_training.partial_rollout"] = c.partial_rollout



def verl_command(overrides: dict[str, Scalar], module: str | None = None,
                 config_name: str | None = None) -> str:
  """The shell command ``python3 -m <module> key=value ...`` for veRL overrides.

  The entry point follows the overrides: ``async_training.*`` selects the
  fully asynchronous recipe, top-level ``rollout.nnodes`` alone the
  one-step-off-policy recipe, anything else ``verl.trainer.main_ppo``; a
  Megatron actor adds the recipe's Megatron ``--config-name``. Arguments are
  quoted with :func:`shlex.join`.
  """
  if "async_training.staleness_threshold" in overrides:
    kind = "fully_async"
  elif "rollout.nnodes" in overrides:
    kind = "one_step_off"
  else:
    kind = "main"
  default_module, megatron_config = _VERL_MODULES[kind]
  argv = ["python3", "-m", module or default_module]
  if config_name is None and overrides.get("actor_rollout_ref.actor.strategy") == "megatron":
    config_name = megatron_config
  if config_name:
    argv.append(f"--config-name={config_name}")
  argv += [f"{k}={fmt(v)}" for k, v in overrides.items()]
  return shlex.join(argv)


EXPORTER = Exporter(name="verl", framework="veRL", version=VERSION, to_config=to_verl,
                    render_settings=verl_command, kind="command")
