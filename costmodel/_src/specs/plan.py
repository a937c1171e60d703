"""A placement and layout of every role of an RL job on a cluster.

A :class:`Plan` names GPU pools, assigns each role (actor, reference, critic,
reward model) to a pool with a layout per phase (training, inference), places
the rollout engines on a pool, and picks the execution mode. Stages on one
pool run one after another; stages on different pools overlap where the
algorithm's stage graph allows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel._src import pytree
from costmodel._src.specs import constraints as rules
from costmodel._src.specs import hardware as hw_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.layout import resolve_memory_fraction
from costmodel._src.specs.model import ModelSpec

ROLES = ("actor", "reference", "critic", "reward")
# Roles with a training phase (and a training layout).
TRAINED_ROLES = ("actor", "critic")


@pytree.pytree_dataclass
class Pool:
  """A named group of GPUs.

  Attributes:
    name: Pool name.
    gpus: GPUs in the pool.
    accelerator: The pool's GPU (a :class:`Hardware` or a preset name); None
      means the cluster's. Pools naming different accelerators make a mixed
      cluster: each stage is timed and its memory checked on its pool's GPU.
  """

  name: str = pytree.static_field()
  gpus: float = 8.0
  accelerator: hw_lib.Hardware | None = None

  def __post_init__(self):
    if isinstance(self.accelerator, str):
      object.__setattr__(self, "accelerator", hw_lib.get(self.accelerator))

  def device(self, cluster: Cluster) -> hw_lib.Hardware:
    """The pool's accelerator: its own, else the cluster's."""
    return self.accelerator if self.accelerator is not None else cluster.accelerator


@pytree.pytree_dataclass
class RolePlan:
  """Where a role lives and how it is laid out.

  Attributes:
    role: One of ``actor``, ``reference``, ``critic``, ``reward``.
    pool: Name of its pool.
    train: Training layout (actor, critic); None for inference-only roles.
    infer: Inference layout (log-probs, values, rewards); defaults to
      ``train`` when None.
  """

  role: str = pytree.static_field()
  pool: str = pytree.static_field()
  train: Parallel | None = None
  infer: Parallel | None = None

  @property
  def infer_layout(self) -> Parallel:
    return self.infer if self.infer is not None else self.train


@pytree.pytree_dataclass
class Mode:
  """Execution mode.

  Attributes:
    staleness: 0 = synchronous on-policy; k >= 1 = generation of step i + k
      overlaps training of step i (one-step-off-policy is k = 1). Needs the
      rollout engines on a pool without the actor's training.
    partial_rollout: Fully asynchronous rollouts that carry unfinished
      sequences over to the next step (cuts the generation tail).
    fuse_inference: Inference of finished samples overlaps the generation
      tail (RLHFuse-style).
    fuse_training: Actor and critic training share one pipeline, filling each
      other's bubbles.
    staleness_threshold: veRL's fully-asynchronous bound on stale samples, as
      a share of a step's batch (``async_training.staleness_threshold``); when
      set (needs staleness >= 1) it replaces ``staleness`` as the depth of the
      bounded queue between generator and trainer, so 0.1 lets the generator
      run a tenth of a step ahead.
    require_batches: Mini-batches the trainer takes per call, streaming
      (veRL's ``async_training.require_batches``; the calls per sync,
      ``trigger_parameter_sync_step``, follow as mini_batches /
      require_batches so a step is the job's batch). None: one call per step
      over the whole batch, after generation. Set, the trainer starts as soon
      as its first call's samples exist (needs the rollout pool apart from
      the actor's training).
    rollout_log_probs: The engine returns the old log-probs with the samples
      (veRL's fully-async default ``use_rollout_log_probs``), so no
      ``old_log_prob`` pass runs on the trainer.
    single_controller: Batches move between roles through one controller
      process (veRL, OpenRLHF and NeMo-RL on Ray): every stage hands its
      batch off (``Efficiency.batch_transfer_bytes_per_s``) and every trainer
      call is a remote call (``train_call_overhead_s``). False for SPMD
      frameworks (DeepSpeed-Chat), where each rank keeps its own shard.
  """

  staleness: int = pytree.static_field(default=0)
  partial_rollout: bool = pytree.static_field(default=False)
  fuse_inference: bool = pytree.static_field(default=False)
  fuse_training: bool = pytree.static_field(default=False)
  staleness_threshold: float | None = pytree.static_field(default=None)
  require_batches: int | None = pytree.static_field(default=None)
  rollout_log_probs: bool = pytree.static_field(default=False)
  single_controller: bool = pytree.static_field(default=True)

  def __post_init__(self):
    pytree.check_integer("Mode", 0, staleness=self.staleness)
    if self.staleness_threshold is not None:
      pytree.check_number("Mode", 0, staleness_threshold=self.staleness_threshold)
    if self.require_batches is not None:
      pytree.check_integer("Mode", 1, require_batches=self.require_batches)
    rules.check_rules("mode", {"staleness": self.staleness, "partial": self.partial_rollout,
                               "threshold": (np.nan if self.staleness_threshold is None
                                             else self.staleness_threshold)}, "Mode: ")

  @property
  def queue_depth(self) -> float:
    """Steps the generator may run ahead of the trainer (k, or the threshold)."""
    if self.staleness_threshold is not None:
      return float(self.staleness_threshold)
    return float(self.staleness)

  @property
  def pipelined(self) -> bool:
    """Whether generation overlaps the trainer (off-policy, or a streaming
    trainer): the step is then the busiest pool's time, not the chain's
    (:func:`costmodel._src.step.schedule.steady_state_s`)."""
    return self.staleness > 0 or self.require_batches is not None

  @property
  def name(self) -> str:
    parts = ["sync" if self.staleness == 0 else f"async(k={self.queue_depth:g})"]
    if self.require_batches is not None:
      parts.append(f"stream({self.require_batches})")
    parts += [tag for flag, tag in _MODE_TAGS if getattr(self, flag)]
    return "+".join(parts)


# The flags of a Mode and the tags they add to its name, in order.
_MODE_TAGS = (("rollout_log_probs", "rollout-logp"), ("partial_rollout", "partial"),
              ("fuse_inference", "fuse-infer"), ("fuse_training", "fuse-train"))


def required_roles(job: RLJob) -> tuple[str, ...]:
  """Roles the job's algorithm needs."""
  needed = {"actor": True, "reference": job.use_reference, "critic": job.has_critic,
            "reward": job.has_reward_model}
  return tuple(r for r in ROLES if needed[r])


def role_model(job: RLJob, role: str) -> ModelSpec:
  """The architecture a role runs."""
  return {"actor": job.actor, "reference": job.actor, "critic": job.critic,
          "reward": job.reward_model}[role]


@pytree.pytree_dataclass
class Plan:
  """Pools, role placement and layouts, rollout engines, execution mode.

  An engine whose ``memory_fraction`` is None gets 0.9 on a rollout pool no
  role shares and 0.6 on a shared one (:func:`resolve_memory_fraction`).
  """

  pools: tuple[Pool, ...]
  roles: tuple[RolePlan, ...]
  engine: Engine
  rollout_pool: str = pytree.static_field()
  mode: Mode = dataclasses.field(default_factory=Mode)

  def __post_init__(self):
    # An engine without a memory fraction takes what its placement leaves it.
    if isinstance(self.engine, Engine) and self.engine.memory_fraction is None:
      shared = any(r.pool == self.rollout_pool for r in self.roles)
      object.__setattr__(self, "engine", resolve_memory_fraction(self.engine, shared))

  def pool(self, name: str) -> Pool:
    for p in self.pools:
      if p.name == name:
        return p
    raise ValueError(f"Plan: pool={name!r} is not one of {[p.name for p in self.pools]}")

  def role(self, name: str) -> RolePlan | None:
    for r in self.roles:
      if r.role == name:
        return r
    return None

  @property
  def pool_names(self) -> tuple[str, ...]:
    return tuple(p.name for p in self.pools)

  def shares_pool(self, role: str) -> bool:
    """True when ``role`` sits on the rollout pool (colocated with generation)."""
    r = self.role(role)
    return r is not None and r.pool == self.rollout_pool

  def replace(self, **changes) -> Plan:
    return dataclasses.replace(self, **changes)

  # ----- convenience constructors (placement families, see placement.py) ---

  @classmethod
  def colocated(cls, job: RLJob, cluster: Cluster, train: Parallel | None = None,
                engine: Engine | None = None, infer: Parallel | None = None,
                critic: Parallel | None = None, mode: Mode | None = None) -> Plan:
    """Every role and the engines on one pool of the whole cluster (veRL's
    hybrid engine, DeepSpeed-Chat): the ``colocated`` placement."""
    from costmodel._src.specs import placement  # pylint: disable=g-import-not-at-top (cycle)
    return placement.build_plan("colocated", job, {"all": float(cluster.n_gpus)}, engine,
                                *_layouts(train, infer, critic), mode=mode)

  @classmethod
  def split(cls, job: RLJob, cluster: Cluster, gen_gpus: int, train: Parallel | None = None,
            engine: Engine | None = None, infer: Parallel | None = None,
            critic: Parallel | None = None, mode: Mode | None = None) -> Plan:
    """Generation on its own pool of ``gen_gpus``; every other role on the rest
    (OpenRLHF, one-step-off-policy and fully asynchronous recipes): the
    ``split`` placement's pools with any mode."""
    from costmodel._src.specs import placement  # pylint: disable=g-import-not-at-top (cycle)
    n = cluster.n_gpus
    if not 0 < gen_gpus < n:
      raise ValueError(f"Plan.split: gen_gpus={gen_gpus} must lie in (0, {n})")
    return placement.build_plan("split", job, {"gen": float(gen_gpus),
                                               "train": float(n - gen_gpus)}, engine,
                                *_layouts(train, infer, critic), mode=mode)


def _layouts(train: Parallel | None, infer: Parallel | None, critic: Parallel | None):
  """(train, infer) layouts by role of the constructors (``build_plan`` fills
  in the defaults: the critic trains like the actor, inference roles run the
  actor's inference layout)."""
  return {"actor": train, "critic": critic}, {"actor": infer, "critic": infer}


def _int(v) -> float | None:
  if not pytree.is_concrete(v):
    return None
  a = np.asarray(v, dtype=float)
  return float(a) if a.ndim == 0 else None


def _concrete(fields: dict) -> bool:
  return all(_int(v) is not None for v in fields.values())


def _samples(job: RLJob) -> float:
  """Samples per step for the batch rules (0, which every batch rule accepts, when traced)."""
  p, s = job.prompts_per_step, job.samples_per_prompt
  if not (pytree.is_concrete(p) and pytree.is_concrete(s)):
    return 0.0
  return float(np.asarray(p, dtype=float) * np.asarray(s, dtype=float))


def _check_layout(where: str, job: RLJob, role: str, layout: Parallel, gpus: float,
                  trained: bool, frameworks: tuple[str, ...], samples: float) -> None:
  fields = rules.layout_fields(role_model(job, role), gpus, layout.tp, layout.pp, layout.cp,
                               layout.ep, etp=layout.etp, vpp=layout.vpp,
                               zero=layout.zero_stage,
                               micro_batch=layout.micro_batch, samples=samples,
                               mini_batch_samples=samples / job.mini_batches, trained=trained)
  if _concrete(fields):
    rules.check_rules("layout", fields, f"{where}: ", frameworks)


def validate(job: RLJob, plan: Plan, cluster: Cluster, frameworks: tuple[str, ...] = ()) -> None:
  """Checks a concrete plan against the job and cluster.

  The numeric rules come from the rule table (:mod:`costmodel._src.specs.constraints`).
  The arguments come in the order of :func:`costmodel.estimate`.

  Args:
    job: The job.
    plan: The plan.
    cluster: The cluster.
    frameworks: Optional rule sets to check as well (``verl``, ``openrlhf``,
      ``nemo_rl``: batch divisibility; ``zero3``: ZeRO-3 without TP/PP/EP).

  Raises:
    TypeError: naming the argument that is not a job, plan or cluster.
    ValueError: naming what is wrong: an unknown or missing pool or role,
      pools larger than the cluster, degrees that do not divide the pool or
      the model's heads, layers or experts, a mode or weight sync the
      placement cannot run (all from the rule table), streaming calls that do
      not divide the job's mini-batches.
  """
  pytree.check_arguments("validate_plan", job=(job, RLJob), plan=(plan, Plan),
                         cluster=(cluster, Cluster))
  frameworks = tuple(frameworks)
  rules.rules("pool", frameworks)  # rejects unknown rule sets early
  samples = _samples(job)
  names = [p.name for p in plan.pools]
  if len(set(names)) != len(names):
    raise ValueError(f"Plan: pool names {names} must be unique")
  for p in plan.pools:
    if p.accelerator is not None and not isinstance(p.accelerator, hw_lib.Hardware):
      raise ValueError(f"Plan: pool {p.name!r} accelerator={p.accelerator!r} must be a "
                       "Hardware, a preset name or None (the cluster's)")
  sizes = {p.name: _int(p.gpus) for p in plan.pools}
  if all(v is not None for v in sizes.values()):
    for name, v in sizes.items():
      rules.check_rules("pool", {"gpus": v}, f"Plan: pool {name!r} ")
    cluster_gpus = _int(cluster.n_gpus)  # None for a traced cluster
    if cluster_gpus is not None:
      rules.check_rules("pools", {"total": sum(sizes.values()), "cluster_gpus": cluster_gpus},
                        "Plan: ")
  if plan.rollout_pool not in names:
    raise ValueError(f"Plan: rollout_pool={plan.rollout_pool!r} is not one of {names}")
  seen = set()
  for r in plan.roles:
    pytree.check_one_of("Plan", ROLES, role=r.role)
    if r.role in seen:
      raise ValueError(f"Plan: role {r.role!r} is placed twice")
    seen.add(r.role)
    if r.pool not in names:
      raise ValueError(f"Plan: role {r.role!r} is on pool={r.pool!r}, not one of {names}")
  for role in required_roles(job):
    r = plan.role(role)
    if r is None:
      raise ValueError(f"Plan: role {role!r} needed by algorithm={job.algorithm!r} has no pool")
    if role in TRAINED_ROLES and r.train is None:
      raise ValueError(f"Plan: role {role!r} needs a train layout")
    if r.infer_layout is None:
      raise ValueError(f"Plan: role {role!r} needs an infer layout")
  for r in plan.roles:
    if r.role not in required_roles(job):
      raise ValueError(f"Plan: role {r.role!r} is not used by algorithm={job.algorithm!r}"
                       f" (roles: {required_roles(job)})")
    gpus = sizes[r.pool]
    if gpus is None:
      continue
    if r.train is not None:
      _check_layout(f"Plan: {r.role} train layout", job, r.role, r.train, gpus, True,
                    frameworks, samples)
    _check_layout(f"Plan: {r.role} infer layout", job, r.role, r.infer_layout, gpus, False,
                  frameworks, samples)
  gpus = sizes[plan.rollout_pool]
  e = plan.engine
  fields = rules.engine_fields(job.actor, gpus, e.tp, e.pp, e.ep, e.dp_attention)
  if gpus is not None and _concrete(fields):
    rules.check_rules("engine", fields, "Plan: ", frameworks)
  a, c = plan.role("actor"), plan.role("critic")
  rb = float(plan.mode.require_batches or 0)
  rules.check_rules("placement", {
      "staleness": plan.mode.staleness, "actor_on_rollout": plan.shares_pool("actor"),
      "fuse_training": plan.mode.fuse_training,
      "critic_on_actor_pool": c is not None and a is not None and a.pool == c.pool,
      "sync_ipc": e.sync_backend == "ipc", "sync_reshard": e.sync_backend == "reshard",
      "require_batches": rb}, "Plan: ", labels={"rollout_pool": plan.rollout_pool})
  rules.check_rules("schedule", {"require_batches": rb, "mini_batches": job.mini_batches},
                    "Plan: ")
