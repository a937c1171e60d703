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
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import shlex
from typing import Any

import numpy as np

import costmodel as cm

Scalar = str | int | float | bool

_RECOMPUTE_NAMES = ("none", "selective", "full")


# ----- concrete values -------------------------------------------------------


def _scalar(value: Any, field: str) -> float:
  """A concrete, finite Python float from a pytree leaf."""
  try:
    a = np.asarray(value, dtype=float)
  except Exception as e:  # a tracer, or something that is not a number
    raise ValueError(f"{field}={value!r} must be a concrete number to export "
                     f"(got {type(value).__name__})") from e
  if a.ndim != 0:
    raise ValueError(f"{field} has shape {a.shape}; export one plan at a time, not a batch")
  v = float(a)
  if not math.isfinite(v):
    raise ValueError(f"{field}={v} must be finite")
  return v


def require_int(value: Any, field: str) -> int:
  """Converts a layout leaf (a float for the search) to an integer.

  Args:
    value: A Python number, NumPy or concrete JAX scalar.
    field: The field's name, used in the error message.

  Returns:
    ``int(value)`` when ``value`` is integral (within 1e-6 relative).

  Raises:
    ValueError: naming ``field`` when the value is traced, batched, not finite
      or not an integer (a relaxed plan passed where a rounded one belongs).

  Example:
    >>> require_int(4.0, "engine.tp")
    4
  """
  v = _scalar(value, field)
  r = round(v)
  if abs(v - r) > 1e-6 * max(1.0, abs(v)):
    raise ValueError(f"{field}={v:g} must be an integer: export needs a rounded plan "
                     "(a relaxed plan has real-valued degrees)")
  return int(r)


@dataclasses.dataclass(frozen=True)
class _Layout:
  """One role's layout in one phase, with integer degrees."""

  tp: int
  pp: int
  cp: int
  ep: int
  vpp: int
  micro_batch: int
  zero_stage: int
  recompute: int
  offload: bool
  sequence_parallel: bool

  @property
  def model_parallel(self) -> int:
    return self.tp * self.pp * self.cp

  def degrees(self) -> tuple[int, int, int, int, int]:
    return (self.tp, self.pp, self.cp, self.ep, self.vpp)


def _layout(p: cm.Parallel, where: str) -> _Layout:
  f = {name: require_int(getattr(p, name), f"{where}.{name}")
       for name in ("tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage", "recompute",
                    "offload")}
  f["offload"] = bool(f["offload"])
  return _Layout(sequence_parallel=bool(p.sequence_parallel), **f)


@dataclasses.dataclass(frozen=True)
class _Engine:
  tp: int
  pp: int
  ep: int
  memory_fraction: float
  max_seqs: int
  prefix_caching: bool


@dataclasses.dataclass(frozen=True)
class _Concrete:
  """A validated plan and job with plain Python numbers."""

  algorithm: str
  prompts: int
  n: int
  prompt_len: int
  max_response: int
  mini_batches: int
  ppo_epochs: int
  oversample: float
  use_reference: bool
  pools: dict[str, int]
  role_pool: dict[str, str]
  train: dict[str, _Layout]
  infer: dict[str, _Layout]
  engine: _Engine
  rollout_pool: str
  staleness: int
  partial_rollout: bool

  @property
  def actor_pool(self) -> str:
    return self.role_pool["actor"]

  @property
  def colocated(self) -> bool:
    return self.rollout_pool == self.actor_pool

  def has(self, role: str) -> bool:
    return role in self.role_pool

  def replicas(self) -> int:
    return self.pools[self.rollout_pool] // (self.engine.tp * self.engine.pp)

  def mini_batch_prompts(self, key: str, framework: str) -> int:
    if self.prompts % self.mini_batches:
      raise ValueError(f"{framework}: {key} = prompts_per_step / mini_batches = {self.prompts} / "
                       f"{self.mini_batches} must be an integer")
    return self.prompts // self.mini_batches


def _concrete(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, framework: str) -> _Concrete:
  """Checks that ``plan`` is concrete and valid, and reads it as integers."""
  pools = {p.name: require_int(p.gpus, f"pool {p.name!r} gpus") for p in plan.pools}
  train, infer = {}, {}
  for r in plan.roles:
    if r.train is not None:
      train[r.role] = _layout(r.train, f"{r.role}.train")
    if r.infer_layout is not None:
      infer[r.role] = _layout(r.infer_layout, f"{r.role}.infer")
  e = plan.engine
  engine = _Engine(
      tp=require_int(e.tp, "engine.tp"), pp=require_int(e.pp, "engine.pp"),
      ep=require_int(e.ep, "engine.ep"),
      memory_fraction=round(_scalar(e.memory_fraction, "engine.memory_fraction"), 6),
      max_seqs=require_int(e.max_seqs, "engine.max_seqs"), prefix_caching=bool(e.prefix_caching))
  cm.validate_plan(plan, job, cluster)
  mode = plan.mode
  for name in ("fuse_inference", "fuse_training"):
    if getattr(mode, name):
      raise ValueError(f"{framework}: mode.{name}=True (RLHFuse-style stage fusion) has no "
                       "setting in its configuration; export the plan without fusion")
  prompts = require_int(job.prompts_per_step, "job.prompts_per_step")
  n = require_int(job.samples_per_prompt, "job.samples_per_prompt")
  prompt_len = math.ceil(_scalar(job.prompt_len, "job.prompt_len") - 1e-6)
  max_response = math.ceil(_scalar(job.response.max, "job.response.max") - 1e-6)
  return _Concrete(
      algorithm=job.algorithm, prompts=prompts, n=n, prompt_len=prompt_len,
      max_response=max_response, mini_batches=job.mini_batches, ppo_epochs=job.ppo_epochs,
      oversample=_scalar(job.oversample, "job.oversample"), use_reference=bool(job.use_reference),
      pools=pools, role_pool={r.role: r.pool for r in plan.roles}, train=train, infer=infer,
      engine=engine, rollout_pool=plan.rollout_pool, staleness=mode.staleness,
      partial_rollout=mode.partial_rollout)


def _same_degrees(framework: str, role: str, train: _Layout, infer: _Layout, why: str,
                  train_role: str | None = None) -> None:
  """Refuses an inference layout whose degrees differ from the training one."""
  names = ("tp", "pp", "cp", "ep", "vpp")
  for name, a, b in zip(names, train.degrees(), infer.degrees(), strict=True):
    if a != b:
      raise ValueError(f"{framework}: {role}.infer.{name}={b} differs from "
                       f"{train_role or role}.train.{name}={a}; {why}")


def _check_recompute(framework: str, where: str, lay: _Layout, what: str) -> None:
  if lay.recompute == 1:
    raise ValueError(f"{framework}: {where}.recompute=selective has no setting: {what} "
                     "switches full activation checkpointing on or off; use recompute 'full' or "
                     "'none'")


def _check_batch(framework: str, key: str, samples: int, dp: int, micro: int,
                 micro_key: str) -> None:
  """Samples per optimizer step must split evenly over DP ranks and micro-batches."""
  if samples % dp:
    raise ValueError(f"{framework}: {key} holds {samples} samples, not divisible by the "
                     f"{dp} data-parallel ranks")
  if (samples // dp) % micro:
    raise ValueError(f"{framework}: {micro_key}={micro} must divide the {samples // dp} samples "
                     f"per data-parallel rank of one mini-batch ({key})")


# ----- pools as nodes --------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _fits(demands: tuple[tuple[int, int], ...], free: tuple[int, ...]) -> bool:
  """Whether pools of ``nnodes x per_node`` GPUs fit on nodes with ``free`` GPUs."""
  if not demands:
    return True
  (nnodes, per_node), rest = demands[0], demands[1:]
  classes = sorted({c for c in free if c >= per_node}, reverse=True)
  counts = [free.count(c) for c in classes]

  def choose(i: int, left: int, taken: tuple[tuple[int, int], ...]) -> bool:
    if left == 0:
      new = list(free)
      for c, k in taken:
        for _ in range(k):
          new.remove(c)
          new.append(c - per_node)
      return _fits(rest, tuple(sorted(new, reverse=True)))
    if i == len(classes):
      return False
    for k in range(min(left, counts[i]), -1, -1):
      if choose(i + 1, left - k, taken + ((classes[i], k),)):
        return True
    return False

  return choose(0, nnodes, ())


def _node_layouts(sizes: dict[str, int], cluster: cm.Cluster,
                  framework: str) -> dict[str, tuple[int, int]]:
  """Writes each pool as ``(nnodes, n_gpus_per_node)`` with the pools fitting together.

  A framework places a role group as the same number of GPUs on each of
  ``nnodes`` nodes. Each pool takes the fewest nodes that allow it (whole
  nodes, or part of one node, before a split over several nodes), as long as
  all pools still fit on the cluster.
  """
  gpn, nodes = cluster.gpus_per_node, cluster.nodes
  options = {}
  for name, g in sizes.items():
    opts = [(k, g // k) for k in range(1, nodes + 1) if g % k == 0 and g // k <= gpn]
    if not opts:
      raise ValueError(
          f"{framework}: pool {name!r} of {g} GPUs is not nnodes x n_gpus_per_node with the "
          f"same GPUs on every node (at most {nodes} nodes of {gpn} GPUs); use whole nodes, or "
          "a size that splits evenly over the nodes")
    options[name] = opts
  for combo in itertools.product(*options.values()):
    demands = tuple(sorted(combo, key=lambda d: (-d[1], -d[0])))
    if _fits(demands, (gpn,) * nodes):
      return dict(zip(options, combo, strict=True))
  raise ValueError(
      f"{framework}: pools {sizes} cannot be placed together as nnodes x n_gpus_per_node "
      f"(uniform per node) on {nodes} nodes of {gpn} GPUs")


# ----- veRL ------------------------------------------------------------------

_VERL_ESTIMATOR = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo",
                   "reinforce_pp": "reinforce_plus_plus", "rloo": "rloo", "remax": "remax"}

_VERL_MODULES = {
    "main": ("verl.trainer.main_ppo", "ppo_megatron_trainer"),
    "fully_async": ("verl.experimental.fully_async_policy.fully_async_main",
                    "fully_async_ppo_megatron_trainer"),
    "one_step_off": ("verl.experimental.one_step_off_policy.main_ppo",
                     "one_step_off_ppo_megatron_trainer"),
}


def _verl_engine_keys(o: dict, prefix: str, lay: _Layout, strategy: str, role: str,
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
      o[f"{m}.sequence_parallel"] = lay.sequence_parallel and lay.tp > 1
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
  for name, v in (("tp", lay.tp), ("pp", lay.pp), ("ep", lay.ep)):
    if v > 1:
      raise ValueError(f"{fw}: {role}.{'train' if train else 'infer'}.{name}={v}: FSDP training "
                       "has no tensor, pipeline or expert parallelism (only Ulysses sequence "
                       "parallelism, cp); use strategy='megatron'")
  o[f"{prefix}.ulysses_sequence_parallel_size"] = lay.cp


def _verl_fsdp_state(o: dict, fsdp: str, model: str, lay: _Layout, role: str,
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
  _check_recompute(fw, f"{role}.train", lay, "FSDP's enable_gradient_checkpointing")
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
  c = _concrete(plan, job, cluster, fw)
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
  nodes = _node_layouts(placed, cluster, fw)

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
  _same_degrees(fw, "actor", actor, c.infer["actor"],
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
  _check_batch(fw, "actor_rollout_ref.actor.ppo_mini_batch_size", mini * c.n, dp,
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
    _same_degrees(fw, "critic", critic, c.infer["critic"],
                  "veRL computes values with the critic's training layout")
    o["critic.strategy"] = strategy
    o["critic.ppo_micro_batch_size_per_gpu"] = critic.micro_batch
    o["critic.forward_micro_batch_size_per_gpu"] = c.infer["critic"].micro_batch
    _verl_engine_keys(o, "critic", critic, strategy, "critic", train=True)
    if strategy != "megatron":
      _verl_fsdp_state(o, "critic.model.fsdp_config", "critic.model", critic, "critic", strategy)
    cdp = c.pools[a_pool] // (critic.model_parallel if strategy == "megatron" else critic.cp)
    _check_batch(fw, "critic.ppo_mini_batch_size", mini * c.n, cdp, critic.micro_batch,
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


def _verl_placement(o: dict, c: _Concrete, nodes: dict, version: str, async_recipe: str,
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


def _fmt(v: Scalar) -> str:
  if isinstance(v, bool):
    return "True" if v else "False"
  if isinstance(v, float):
    return repr(v)
  return str(v)


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
  argv += [f"{k}={_fmt(v)}" for k, v in overrides.items()]
  return shlex.join(argv)


# ----- OpenRLHF --------------------------------------------------------------

# dotted name (v0.10.2+, commit ed62d0e2) -> underscore name (v0.9.x-v0.10.1)
_OPENRLHF_LEGACY = {
    "actor.num_nodes": "actor_num_nodes", "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "ref.num_nodes": "ref_num_nodes", "ref.num_gpus_per_node": "ref_num_gpus_per_node",
    "critic.num_nodes": "critic_num_nodes",
    "critic.num_gpus_per_node": "critic_num_gpus_per_node",
    "reward.num_nodes": "reward_num_nodes",
    "reward.num_gpus_per_node": "reward_num_gpus_per_node",
    "vllm.num_engines": "vllm_num_engines",
    "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm.enable_sleep": "vllm_enable_sleep",
    "vllm.enable_prefix_caching": "enable_prefix_caching",
    "train.colocate_actor_ref": "colocate_actor_ref",
    "train.colocate_critic_reward": "colocate_critic_reward",
    "train.colocate_all": "colocate_all_models",
    "ds.enable_sleep": "deepspeed_enable_sleep",
    "ds.zero_stage": "zero_stage", "ds.tensor_parallel_size": "ds_tensor_parallel_size",
    "ds.ring_attn_size": "ring_attn_size", "ds.adam_offload": "adam_offload",
    "ds.packing_samples": "packing_samples",
    "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "ref.offload": "ref_reward_offload", "reward.offload": "ref_reward_offload",
    "rollout.batch_size": "rollout_batch_size",
    "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "train.batch_size": "train_batch_size", "train.micro_batch_size": "micro_train_batch_size",
    "train.max_epochs": "max_epochs", "data.max_len": "max_len",
    "rollout.max_new_tokens": "max_new_tokens",
    "algo.advantage.estimator": "advantage_estimator", "algo.kl.init_coef": "init_kl_coef",
    "algo.dynamic_filtering_enable": "dynamic_filtering",
    "train.async_enable": "async_train", "train.async_queue_size": "async_queue_size",
    "train.partial_rollout_enable": "partial_rollout",
}

_OPENRLHF_ESTIMATOR = {"ppo": "gae", "grpo": "group_norm", "dapo": "group_norm",
                       "reinforce_pp": "reinforce", "rloo": "rloo"}


def _openrlhf_roles(c: _Concrete) -> tuple[dict[str, bool], dict[str, str]]:
  """Colocation flags and the pool of every model, or ValueError."""
  fw = "OpenRLHF"
  a_pool, r_pool = c.actor_pool, c.rollout_pool
  others = {r: c.role_pool[r] for r in ("reference", "critic", "reward") if c.has(r)}
  flags = {"colocate_all": False, "colocate_actor_ref": False, "colocate_critic_reward": False}
  away = {r: p for r, p in others.items() if p != a_pool}
  if c.colocated or any(others.get(r) == a_pool for r in ("critic", "reward")):
    # Only --train.colocate_all shares the actor's GPUs with the vLLM engines
    # or with the critic and reward model, and it takes every model along.
    why = ("the vLLM engines share the actor's GPUs" if c.colocated
           else "the critic or reward model shares the actor's GPUs")
    if away:
      r, p = next(iter(away.items()))
      raise ValueError(f"{fw}: train.colocate_all: {why} only with --train.colocate_all, which "
                       f"places every model on the actor's pool {a_pool!r}, but {r} is on {p!r}")
    if not c.colocated and c.staleness == 0:
      raise ValueError(f"{fw}: train.colocate_all: {why} only with --train.colocate_all, which in "
                       "a synchronous run also places the vLLM engines there, but the rollout is "
                       f"on its own pool {r_pool!r}; make the plan asynchronous or move the role")
    flags["colocate_all"] = True
    return flags, others
  flags["colocate_actor_ref"] = others.get("reference") == a_pool
  if "critic" in away and "reward" in away and away["critic"] == away["reward"]:
    flags["colocate_critic_reward"] = True
    del away["reward"]
  seen = {a_pool: "actor", r_pool: "the vLLM engines"}
  for r, p in away.items():
    if p in seen:
      raise ValueError(f"{fw}: {r} on pool {p!r} shares it with {seen[p]}; OpenRLHF's colocation "
                       "flags (train.colocate_actor_ref, train.colocate_critic_reward, "
                       "train.colocate_all) cannot express that sharing")
    seen[p] = r
  return flags, others


def to_openrlhf(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
                flag_style: str = "dotted") -> list[str]:
  """The argv of ``python3 -m openrlhf.cli.train_ppo_ray`` that runs ``plan``.

  Every model is a Ray group of ``num_nodes x num_gpus_per_node`` GPUs with
  one DeepSpeed setting (``--ds.*``) for all of them; vLLM engines fill the
  rollout pool (``num_engines = pool / tensor_parallel_size``). Colocation
  follows the plan: ``--train.colocate_all`` when the engines (synchronous)
  or the critic and reward model share the actor's pool,
  ``--train.colocate_actor_ref``, ``--train.colocate_critic_reward``.
  ``--rollout.batch_size`` counts prompts, ``--train.batch_size`` samples per
  optimizer step. ``offload`` maps to ``--ds.adam_offload`` (optimizer state
  in host memory; DeepSpeed keeps the training parameters on the GPU).
  Asynchronous plans use ``--train.async_queue_size = staleness``: the
  generator runs at most that many batches ahead of training.

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job.
    cluster: The cluster.
    flag_style: ``dotted`` (v0.10.2 and later) or ``legacy`` (underscore names
      of v0.9.x-v0.10.1).

  Returns:
    A list of arguments; pass it to :func:`openrlhf_command`.

  Raises:
    ValueError: naming the setting when OpenRLHF cannot express the plan:
      pipeline or expert parallelism in training (DeepSpeed), vLLM pipeline or
      expert parallelism, selective recompute, layouts or micro-batches that
      differ between models (one ``--ds.*`` and one micro-batch per phase),
      placements its colocation flags cannot express, ReMax, pools that are
      not uniform per node, batches that do not split over the ranks.

  References:
    OpenRLHF ``openrlhf/cli/train_ppo_ray.py`` (dotted names from commit
    ed62d0e2, v0.10.2; the ``colocate_all`` and sample-batch assertions).
  """
  if flag_style not in ("dotted", "legacy"):
    raise ValueError(f"to_openrlhf: flag_style={flag_style!r} is not one of ('dotted', 'legacy')")
  fw = "OpenRLHF"
  c = _concrete(plan, job, cluster, fw)
  if c.algorithm not in _OPENRLHF_ESTIMATOR:
    raise ValueError(f"{fw}: algorithm={c.algorithm!r} has no algo.advantage.estimator (gae, "
                     "reinforce, rloo, reinforce_baseline, group_norm, dr_grpo)")
  actor = c.train["actor"]
  for name in ("pp", "vpp", "ep"):
    if getattr(actor, name) > 1:
      raise ValueError(f"{fw}: actor.train.{name}={getattr(actor, name)}: OpenRLHF trains with "
                       "DeepSpeed (ZeRO, AutoTP, ring attention), which has no pipeline or expert "
                       "parallelism")
  _check_recompute(fw, "actor.train", actor, "--actor.gradient_checkpointing_enable")
  e = c.engine
  for name in ("pp", "ep"):
    if getattr(e, name) > 1:
      raise ValueError(f"{fw}: engine.{name}={getattr(e, name)}: OpenRLHF's vLLM engines take "
                       "only tensor_parallel_size")
  _same_degrees(fw, "actor", actor, c.infer["actor"],
                "OpenRLHF computes old log-probs with the actor's DeepSpeed layout")
  # One --ds.* layout for every model, one micro-batch per phase.
  for role, phase in (("critic", "train"), ("critic", "infer"), ("reference", "infer"),
                      ("reward", "infer")):
    if not c.has(role):
      continue
    lay = getattr(c, phase)[role]
    names = ("tp", "pp", "cp", "ep", "vpp") + (("zero_stage", "offload", "recompute")
                                               if phase == "train" else ())
    for name in names:
      if getattr(lay, name) != getattr(actor, name):
        raise ValueError(f"{fw}: {role}.{phase}.{name}={getattr(lay, name)} differs from "
                         f"actor.train.{name}={getattr(actor, name)}; OpenRLHF applies one "
                         "--ds.* setting to every model")
  micro = {"train": actor.micro_batch, "infer": c.infer["actor"].micro_batch}
  for role in ("critic", "reference", "reward"):
    for phase in ("train", "infer"):
      lay = getattr(c, phase).get(role) if c.has(role) else None
      if lay is not None and lay.micro_batch != micro[phase]:
        key = "train.micro_batch_size" if phase == "train" else "rollout.micro_batch_size"
        raise ValueError(f"{fw}: {role}.{phase}.micro_batch={lay.micro_batch} differs from the "
                         f"actor's {micro[phase]}; OpenRLHF has one --{key} for every model")
  if flag_style == "legacy" and c.has("reference") and c.has("reward"):
    if c.infer["reference"].offload != c.infer["reward"].offload:
      raise ValueError(f"{fw}: reference.infer.offload and reward.infer.offload differ; the "
                       "legacy flags have one --ref_reward_offload for both")

  flags, others = _openrlhf_roles(c)
  placed = {c.actor_pool: c.pools[c.actor_pool], c.rollout_pool: c.pools[c.rollout_pool]}
  placed.update({p: c.pools[p] for p in others.values()})
  nodes = _node_layouts(placed, cluster, fw)

  actor_gpus = c.pools[c.actor_pool]
  if flags["colocate_all"] and c.staleness == 0:
    if actor_gpus != c.replicas() * e.tp:
      raise ValueError(f"{fw}: train.colocate_all needs actor GPUs ({actor_gpus}) == "
                       f"vllm.num_engines x vllm.tensor_parallel_size ({c.replicas()} x {e.tp})")
  args: list[tuple[str, Scalar | None]] = []  # (dotted name, value or None for a flag)
  for role, key in (("actor", "actor"), ("reference", "ref"), ("critic", "critic"),
                    ("reward", "reward")):
    if role == "actor" or c.has(role):
      nn, g = nodes[c.role_pool[role]]
      args += [(f"{key}.num_nodes", nn), (f"{key}.num_gpus_per_node", g)]
  args += [("vllm.num_engines", c.replicas()), ("vllm.tensor_parallel_size", e.tp),
           ("vllm.gpu_memory_utilization", e.memory_fraction)]
  if e.prefix_caching:
    args.append(("vllm.enable_prefix_caching", None))
  for name in ("colocate_all", "colocate_actor_ref", "colocate_critic_reward"):
    if flags[name]:
      args.append((f"train.{name}", None))
  if flags["colocate_all"] and c.staleness == 0:
    args += [("vllm.enable_sleep", None), ("ds.enable_sleep", None)]
  args += [("ds.zero_stage", actor.zero_stage), ("ds.tensor_parallel_size", actor.tp),
           ("ds.ring_attn_size", actor.cp)]
  if actor.cp > 1:
    args.append(("ds.packing_samples", None))  # ring attention runs on packed samples
  if actor.offload:
    args.append(("ds.adam_offload", None))
  if actor.recompute == 2:
    args.append(("actor.gradient_checkpointing_enable", None))
  for role, key in (("reference", "ref.offload"), ("reward", "reward.offload")):
    if c.has(role) and c.infer[role].offload:
      args.append((key, None))

  dp = actor_gpus // (actor.tp * actor.cp)
  samples = c.prompts * c.n
  mini = c.mini_batch_prompts("train.batch_size", fw) * c.n
  _check_batch(fw, "train.batch_size", mini, dp, actor.micro_batch, "train.micro_batch_size")
  if samples // micro["infer"] < dp:
    raise ValueError(f"{fw}: rollout.micro_batch_size={micro['infer']} leaves "
                     f"{samples // micro['infer']} micro-batches for {dp} actor processes "
                     "(OpenRLHF asserts at least one each)")
  args += [("rollout.batch_size", c.prompts), ("rollout.n_samples_per_prompt", c.n),
           ("rollout.micro_batch_size", micro["infer"]), ("train.batch_size", mini),
           ("train.micro_batch_size", actor.micro_batch), ("train.max_epochs", c.ppo_epochs),
           ("data.max_len", c.prompt_len + c.max_response),
           ("rollout.max_new_tokens", c.max_response),
           ("algo.advantage.estimator", _OPENRLHF_ESTIMATOR[c.algorithm])]
  if not c.use_reference:
    args.append(("algo.kl.init_coef", 0.0))  # no reference model is created
  if c.algorithm == "dapo":
    args.append(("algo.dynamic_filtering_enable", None))
  if c.staleness > 0:
    args += [("train.async_enable", None), ("train.async_queue_size", c.staleness)]
    if c.partial_rollout:
      args.append(("train.partial_rollout_enable", None))

  argv: list[str] = []
  seen = set()
  for name, value in args:
    flag = "--" + (_OPENRLHF_LEGACY[name] if flag_style == "legacy" else name)
    if flag in seen:  # --ref_reward_offload covers both models
      continue
    seen.add(flag)
    argv.append(flag)
    if value is not None:
      argv.append(_fmt(value))
  return argv


def openrlhf_command(argv: list[str]) -> str:
  """``python3 -m openrlhf.cli.train_ppo_ray ...``, quoted with :func:`shlex.join`."""
  return shlex.join(["python3", "-m", "openrlhf.cli.train_ppo_ray", *argv])


# ----- NeMo-RL ---------------------------------------------------------------


def _nemo_cluster(c: _Concrete, cluster: cm.Cluster) -> tuple[dict, dict]:
  """``cluster`` and ``policy.generation.colocated`` sections."""
  fw = "NeMo-RL"
  gpn = cluster.gpus_per_node

  def whole(pool: str) -> int:
    g = c.pools[pool]
    if g % gpn:
      raise ValueError(f"{fw}: pool {pool!r} of {g} GPUs is not whole nodes of {gpn} GPUs; on "
                       "more than one node NeMo-RL gives generation and training whole nodes "
                       "(policy.generation.colocated.resources.num_nodes)")
    return g // gpn

  a, r = c.actor_pool, c.rollout_pool
  if c.colocated:
    g = c.pools[a]
    if g <= gpn:
      return {"num_nodes": 1, "gpus_per_node": g}, {"enabled": True}
    return {"num_nodes": whole(a), "gpus_per_node": gpn}, {"enabled": True}
  total = c.pools[a] + c.pools[r]
  if total <= gpn:
    return ({"num_nodes": 1, "gpus_per_node": total},
            {"enabled": False, "resources": {"num_nodes": 1, "gpus_per_node": c.pools[r]}})
  gen_nodes, train_nodes = whole(r), whole(a)
  return ({"num_nodes": gen_nodes + train_nodes, "gpus_per_node": gpn},
          {"enabled": False, "resources": {"num_nodes": gen_nodes, "gpus_per_node": gpn}})


def to_nemo_rl(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster,
               backend: str | None = None) -> dict[str, Any]:
  """A NeMo-RL GRPO config snippet (nested dict) that runs ``plan``.

  The policy workers hold the actor and the reference; generation (vLLM)
  shares their GPUs (``colocated.enabled``) or takes its own: part of the node
  on one node, whole nodes otherwise. Training uses DTensor (FSDP2: TP,
  CP, full sharding, CPU offload) or Megatron (TP, PP, CP, EP; ZeRO 0-3 via
  the distributed optimizer and Megatron FSDP). ``train_global_batch_size``
  counts samples per optimizer step.

  Args:
    plan: A concrete (rounded) plan.
    job: The RL job (GRPO, DAPO or RLOO).
    cluster: The cluster.
    backend: ``dtensor`` or ``megatron``; None picks DTensor unless the
      layout needs Megatron (pp > 1, ep > 1 or zero_stage < 3).

  Returns:
    Nested dict with ``cluster``, ``grpo``, ``policy`` (and ``loss_fn`` for
    asynchronous GRPO); :func:`to_yaml` writes it.

  Raises:
    ValueError: naming the setting when NeMo-RL's GRPO config cannot express
      the plan: PPO (a critic: NeMo-RL's PPO, Megatron only, has its own
      recipe outside this GRPO config), REINFORCE++ and ReMax, a reward model,
      more than one PPO epoch, a reference or extra pool away from the policy,
      pools that are not whole nodes on several nodes, PP/EP or ZeRO < 3 with
      DTensor, interleaved pipelines, offload with Megatron, selective
      recompute.

  References:
    NVIDIA-NeMo/RL ``examples/configs/grpo_math_1B.yaml``; PPO support:
    NVIDIA-NeMo/RL pull request 2530 (Megatron only).
  """
  fw = "NeMo-RL"
  if backend not in (None, "dtensor", "megatron"):
    raise ValueError(f"to_nemo_rl: backend={backend!r} is not one of (None, 'dtensor', 'megatron')")
  c = _concrete(plan, job, cluster, fw)
  if c.has("critic"):
    raise ValueError(f"{fw}: algorithm={c.algorithm!r} needs a critic; the GRPO config has no "
                     "critic (value model) settings, and NeMo-RL's PPO (Megatron only) is a "
                     "separate recipe this export does not write")
  if c.algorithm not in ("grpo", "dapo", "rloo"):
    raise ValueError(f"{fw}: algorithm={c.algorithm!r}: the GRPO config expresses grpo, dapo "
                     "(dynamic sampling) and rloo (leave-one-out baseline) only")
  if c.has("reward"):
    raise ValueError(f"{fw}: a reward model has no pool in the GRPO config (rewards come from "
                     "environments); use a rule-based reward")
  if c.ppo_epochs != 1:
    raise ValueError(f"{fw}: ppo_epochs={c.ppo_epochs}: GRPO makes one pass over each batch")
  a_pool = c.actor_pool
  if c.has("reference") and c.role_pool["reference"] != a_pool:
    raise ValueError(f"{fw}: reference on pool {c.role_pool['reference']!r}: the policy workers "
                     f"on the actor's pool {a_pool!r} hold the reference model")
  actor = c.train["actor"]
  _same_degrees(fw, "actor", actor, c.infer["actor"],
                "the policy workers compute log-probs with the training layout")
  if c.has("reference"):
    _same_degrees(fw, "reference", actor, c.infer["reference"],
                  "the policy workers compute reference log-probs with the training layout",
                  train_role="actor")
    if c.infer["reference"].micro_batch != c.infer["actor"].micro_batch:
      raise ValueError(f"{fw}: reference.infer.micro_batch differs from the actor's; the policy "
                       "has one logprob_batch_size")
  if backend is None:
    backend = "megatron" if (actor.pp > 1 or actor.ep > 1 or actor.zero_stage < 3) else "dtensor"
  _check_recompute(fw, "actor.train", actor, "activation_checkpointing")
  if actor.vpp > 1:
    raise ValueError(f"{fw}: actor.train.vpp={actor.vpp}: megatron_cfg has no interleaved "
                     "(virtual) pipeline setting")
  e = c.engine
  cluster_cfg, colocated = _nemo_cluster(c, cluster)

  if backend == "dtensor":
    for name in ("pp", "ep"):
      if getattr(actor, name) > 1:
        raise ValueError(f"{fw}: actor.train.{name}={getattr(actor, name)}: dtensor_cfg has "
                         "tensor and context parallelism only; use backend='megatron'")
    if actor.zero_stage != 3:
      raise ValueError(f"{fw}: actor.train.zero_stage={actor.zero_stage}: DTensor (FSDP2) "
                       "shards parameters, gradients and optimizer state; use backend='megatron'")
    train_cfg = {
        "dtensor_cfg": {"enabled": True, "tensor_parallel_size": actor.tp,
                        "context_parallel_size": actor.cp,
                        "sequence_parallel": actor.sequence_parallel and actor.tp > 1,
                        "activation_checkpointing": actor.recompute == 2,
                        "cpu_offload": actor.offload},
        "megatron_cfg": {"enabled": False}}
    dp = c.pools[a_pool] // (actor.tp * actor.cp)
  else:
    if actor.offload:
      raise ValueError(f"{fw}: actor.train.offload=1: megatron_cfg has no CPU offload setting; "
                       "use backend='dtensor'")
    ddp = {"use_custom_fsdp": actor.zero_stage >= 2}
    if actor.zero_stage >= 2:
      ddp["data_parallel_sharding_strategy"] = ("optim_grads" if actor.zero_stage == 2
                                                else "optim_grads_params")
    train_cfg = {
        "dtensor_cfg": {"enabled": False},
        "megatron_cfg": {"enabled": True, "tensor_model_parallel_size": actor.tp,
                         "pipeline_model_parallel_size": actor.pp,
                         "context_parallel_size": actor.cp,
                         "expert_model_parallel_size": actor.ep,
                         "sequence_parallel": actor.sequence_parallel and actor.tp > 1,
                         "activation_checkpointing": actor.recompute == 2,
                         "optimizer": {"use_distributed_optimizer": actor.zero_stage >= 1},
                         "distributed_data_parallel_config": ddp}}
    dp = c.pools[a_pool] // actor.model_parallel
  gbs = c.mini_batch_prompts("policy.train_global_batch_size", fw) * c.n
  _check_batch(fw, "policy.train_global_batch_size", gbs, dp, actor.micro_batch,
               "policy.train_micro_batch_size")

  grpo: dict[str, Any] = {"num_prompts_per_step": c.prompts, "num_generations_per_prompt": c.n,
                          "normalize_rewards": c.algorithm != "rloo",
                          "use_leave_one_out_baseline": c.algorithm == "rloo"}
  if c.algorithm == "dapo":
    grpo["use_dynamic_sampling"] = True
    grpo["batch_multiplier"] = round(c.oversample, 6)
  asynchronous = c.staleness > 0
  grpo["async_grpo"] = {"enabled": asynchronous}
  if asynchronous:
    grpo["async_grpo"]["max_trajectory_age_steps"] = c.staleness
    grpo["async_grpo"]["in_flight_weight_updates"] = c.partial_rollout
  out: dict[str, Any] = {"cluster": cluster_cfg, "grpo": grpo}
  if asynchronous:  # the config asks for importance-sampling correction in async GRPO
    out["loss_fn"] = {"use_importance_sampling_correction": True}
  vllm_cfg = {"tensor_parallel_size": e.tp, "pipeline_parallel_size": e.pp,
              "expert_parallel_size": e.ep, "gpu_memory_utilization": e.memory_fraction,
              "async_engine": asynchronous}
  out["policy"] = {
      "train_global_batch_size": gbs,
      "train_micro_batch_size": actor.micro_batch,
      "logprob_batch_size": c.infer["actor"].micro_batch,
      "max_total_sequence_length": c.prompt_len + c.max_response,
      **train_cfg,
      "generation": {"backend": "vllm", "max_new_tokens": c.max_response, "vllm_cfg": vllm_cfg,
                     "vllm_kwargs": {"max_num_seqs": e.max_seqs,
                                     "enable_prefix_caching": e.prefix_caching},
                     "colocated": colocated},
  }
  return out


# ----- YAML ------------------------------------------------------------------

_YAML_PLAIN = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def _yaml_scalar(v: Any) -> str:
  if v is None:
    return "null"
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, int):
    return str(v)
  if isinstance(v, float):
    if math.isnan(v):
      return ".nan"
    if math.isinf(v):
      return ".inf" if v > 0 else "-.inf"
    return repr(v)
  if isinstance(v, str):
    looks_number = True
    try:
      float(v)
    except ValueError:
      looks_number = False
    if (v and set(v) <= _YAML_PLAIN and v.lower() not in _YAML_WORDS and not looks_number
        and v[0] not in "-."):
      return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
  raise ValueError(f"to_yaml: value {v!r} of type {type(v).__name__} is not a YAML scalar")


def to_yaml(d: dict[str, Any], indent: int = 2) -> str:
  """Block-style YAML for nested dicts of scalars (and lists of scalars).

  Strings that YAML would read as something else (``true``, ``1e3``, ``""``)
  are double-quoted; lists are written in flow style.

  Example:
    >>> print(to_yaml({"cluster": {"num_nodes": 2, "gpus_per_node": 8}}), end="")
    cluster:
      num_nodes: 2
      gpus_per_node: 8
  """
  lines: list[str] = []

  def emit(node: dict, depth: int) -> None:
    for k, v in node.items():
      key = _yaml_scalar(str(k))
      pad = " " * (indent * depth)
      if isinstance(v, dict):
        if v:
          lines.append(f"{pad}{key}:")
          emit(v, depth + 1)
        else:
          lines.append(f"{pad}{key}: {{}}")
      elif isinstance(v, (list, tuple)):
        lines.append(f"{pad}{key}: [{', '.join(_yaml_scalar(x) for x in v)}]")
      else:
        lines.append(f"{pad}{key}: {_yaml_scalar(v)}")

  emit(d, 0)
  return "\n".join(lines) + "\n"
