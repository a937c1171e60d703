"""What every export shares: a plan read as integers, pools as nodes, checks.

:func:`concrete` checks that a plan is concrete and valid and reads it as
plain Python numbers (:class:`Concrete`); :func:`node_layouts` writes pools
as ``nnodes x n_gpus_per_node``; the ``check_*``, :func:`refuse_degrees` and
:func:`same_degrees` functions hold the refusals that more than one framework
makes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any

import numpy as np

import costmodel as cm

Scalar = str | int | float | bool


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
class Layout:
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

  @property
  def sequence_parallel_on(self) -> bool:
    """Sequence parallelism as the backends set it: requested, and tp > 1."""
    return self.sequence_parallel and self.tp > 1

  def degrees(self) -> tuple[int, int, int, int, int]:
    return (self.tp, self.pp, self.cp, self.ep, self.vpp)


def _layout(p: cm.Parallel, where: str) -> Layout:
  f = {name: require_int(getattr(p, name), f"{where}.{name}")
       for name in ("tp", "pp", "cp", "ep", "vpp", "micro_batch", "zero_stage", "recompute",
                    "offload")}
  f["offload"] = bool(f["offload"])
  return Layout(sequence_parallel=bool(p.sequence_parallel), **f)


@dataclasses.dataclass(frozen=True)
class _Engine:
  tp: int
  pp: int
  ep: int
  memory_fraction: float
  max_seqs: int
  prefix_caching: bool


@dataclasses.dataclass(frozen=True)
class Concrete:
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
  train: dict[str, Layout]
  infer: dict[str, Layout]
  engine: _Engine
  rollout_pool: str
  staleness: int
  partial_rollout: bool
  moe: bool
  critic_moe: bool

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


def concrete(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, framework: str) -> Concrete:
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
  return Concrete(
      algorithm=job.algorithm, prompts=prompts, n=n, prompt_len=prompt_len,
      max_response=max_response, mini_batches=job.mini_batches, ppo_epochs=job.ppo_epochs,
      oversample=_scalar(job.oversample, "job.oversample"), use_reference=bool(job.use_reference),
      pools=pools, role_pool={r.role: r.pool for r in plan.roles}, train=train, infer=infer,
      engine=engine, rollout_pool=plan.rollout_pool, staleness=mode.staleness,
      partial_rollout=mode.partial_rollout, moe=job.actor.n_experts > 0,
      critic_moe=job.critic is not None and job.critic.n_experts > 0)


def same_degrees(framework: str, role: str, train: Layout, infer: Layout, why: str,
                 train_role: str | None = None) -> None:
  """Refuses an inference layout whose degrees differ from the training one."""
  names = ("tp", "pp", "cp", "ep", "vpp")
  for name, a, b in zip(names, train.degrees(), infer.degrees(), strict=True):
    if a != b:
      raise ValueError(f"{framework}: {role}.infer.{name}={b} differs from "
                       f"{train_role or role}.train.{name}={a}; {why}")


def check_recompute(framework: str, where: str, lay: Layout, what: str) -> None:
  if lay.recompute == 1:
    raise ValueError(f"{framework}: {where}.recompute=selective has no setting: {what} "
                     "switches full activation checkpointing on or off; use recompute 'full' or "
                     "'none'")


def refuse_degrees(framework: str, where: str, layout: Any, names: tuple[str, ...],
                   why: str) -> None:
  """Refuses the first degree in ``names`` above 1 (one the framework lacks).

  Raises:
    ValueError: ``"{framework}: {where}.{name}={value}: {why}"``.
  """
  for name in names:
    v = getattr(layout, name)
    if v > 1:
      raise ValueError(f"{framework}: {where}.{name}={v}: {why}")


def check_batch(framework: str, key: str, samples: int, dp: int, micro: int,
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


def node_layouts(sizes: dict[str, int], cluster: cm.Cluster,
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




def fmt(v: Scalar | None) -> str:
  """A value as a command-line word (``None`` as ``null``, as Hydra reads it)."""
  if v is None:
    return "null"
  if isinstance(v, bool):
    return "True" if v else "False"
  if isinstance(v, float):
    return repr(v)
  return str(v)
