"""What every export shares: a plan read as integers, pools as nodes, checks.

:func:`concrete` checks that a plan is concrete and valid and reads it as
plain Python numbers (:class:`Concrete`), refusing the settings an exporter
has no key for (:func:`check_supported`). The refusals that more than one
framework makes are in :mod:`export._src.refusals`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

import costmodel as cm

BF16 = cm.Precision()

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
  swap: bool
  etp: int
  sequence_parallel: bool
  precision: cm.Precision = BF16

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
                    "offload", "swap", "etp")}
  f["offload"], f["swap"] = bool(f["offload"]), bool(f["swap"])
  return Layout(sequence_parallel=bool(p.sequence_parallel), precision=p.precision, **f)


@dataclasses.dataclass(frozen=True)
class _Engine:
  tp: int
  pp: int
  ep: int
  memory_fraction: float
  max_seqs: int
  prefix_caching: bool
  cuda_graphs: bool
  sync_backend: str
  dp_attention: bool


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
  mode: cm.Mode

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


# Settings a framework may lack a key for; an exporter names the ones it writes in
# ``concrete(..., supports=...)`` and every other one refuses when not at its default.
FEATURES = ("etp", "train_precision", "engine_precision", "engine_state_precision",
            "dp_attention", "staleness_threshold",
            "require_batches", "rollout_log_probs", "speculative")


def refuse(framework: str, where: str, value: Any, why: str = "") -> None:
  raise ValueError(f"{framework}: {where}={value!r} has no setting in its configuration"
                   + (f"; {why}" if why else "; export the plan without it"))


def check_supported(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, framework: str,
                    supports: frozenset[str] = frozenset()) -> None:
  """Refuses every setting of the plan that is not at its default and not in ``supports``.

  Settings no framework here has (flash attention off, a hidden share of the
  expert all-to-all, stage fusion, SPMD roles, pools on another accelerator,
  LoRA, multi-turn episodes) always refuse; the :data:`FEATURES` refuse
  unless the exporter writes them.

  Raises:
    ValueError: ``"{framework}: {setting}={value} has no setting in its configuration; ..."``.
  """
  for name in supports:
    if name not in FEATURES:
      raise ValueError(f"check_supported: supports={name!r} is not one of {FEATURES}")
  for r in plan.roles:
    for phase, lay in (("train", r.train), ("infer", r.infer)):
      if lay is None:
        continue
      where = f"{r.role}.{phase}"
      if not lay.flash_attention:
        refuse(framework, f"{where}.flash_attention", False, "every backend here runs "
                "FlashAttention-style kernels")
      if _scalar(lay.ep_overlap, f"{where}.ep_overlap") != 0.0:
        refuse(framework, f"{where}.ep_overlap", float(lay.ep_overlap),
                "the share of the expert all-to-all hidden behind compute is an estimate of an "
                "overlapping schedule, not a setting; export with ep_overlap=0")
      etp = require_int(lay.etp, f"{where}.etp")
      if etp != 1 and "etp" not in supports:
        refuse(framework, f"{where}.etp", etp, "its backends keep each expert whole (expert "
                "tensor parallelism 1)")
      if lay.precision != BF16 and "train_precision" not in supports:
        refuse(framework, f"{where}.precision", lay.precision)
  e = plan.engine
  if e.precision.state is not None and "engine_state_precision" not in supports:
    refuse(framework, "engine.precision.state", e.precision.state,
           "the Mamba state format has no key here (the KV cache's format applies)")
  if (dataclasses.replace(e.precision, state=None) != BF16
      and "engine_precision" not in supports):
    refuse(framework, "engine.precision", e.precision)
  if e.dp_attention and "dp_attention" not in supports:
    refuse(framework, "engine.dp_attention", True)
  if e.speculative is not None and "speculative" not in supports:
    refuse(framework, "engine.speculative.kind", e.speculative.kind,
           "its pinned code passes no speculative settings to its rollout engine (NeMo-RL and "
           "slime do)")
  mode = plan.mode
  for name in ("fuse_inference", "fuse_training"):
    if getattr(mode, name):
      refuse(framework, f"mode.{name}", True, "RLHFuse-style stage fusion; export the plan "
              "without fusion")
  if not mode.single_controller:
    refuse(framework, "mode.single_controller", False, f"{framework} moves batches between "
            "its roles through one Ray controller")
  if mode.staleness_threshold is not None and "staleness_threshold" not in supports:
    refuse(framework, "mode.staleness_threshold", mode.staleness_threshold,
            "its asynchronous bound counts whole steps (mode.staleness)")
  if mode.require_batches is not None and "require_batches" not in supports:
    refuse(framework, "mode.require_batches", mode.require_batches,
            "its trainer takes the step's whole batch after generation")
  if mode.rollout_log_probs and "rollout_log_probs" not in supports:
    refuse(framework, "mode.rollout_log_probs", True, "its trainer recomputes the old "
            "log-probs")
  for p in plan.pools:
    if p.accelerator is not None and p.accelerator != cluster.accelerator:
      refuse(framework, f"pool {p.name!r} accelerator", p.accelerator.name,
              "its pools are GPUs of one cluster, chosen by Ray, not by accelerator")
  if job.lora is not None:
    refuse(framework, "job.lora", job.lora, "the export writes full fine-tuning")
  if job.multi_turn is not None:
    refuse(framework, "job.multi_turn", job.multi_turn, "the export writes single-turn "
            "rollouts; multi-turn episodes need the framework's agent loop and tools")


def concrete(plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster, framework: str,
             rule_set: str | None = None, supports: frozenset[str] = frozenset()) -> Concrete:
  """Checks that ``plan`` is concrete and valid, and reads it as integers.

  Args:
    plan, job, cluster: What is exported.
    framework: The framework's name, first word of every refusal.
    rule_set: The framework's batch rules in the rule table
      (``costmodel._src.specs.rule_table``: ``verl``, ``openrlhf``, ...),
      checked after the core rules.
    supports: The :data:`FEATURES` the exporter writes (see :func:`check_supported`).
  """
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
      max_seqs=require_int(e.max_seqs, "engine.max_seqs"), prefix_caching=bool(e.prefix_caching),
      cuda_graphs=bool(e.cuda_graphs), sync_backend=e.sync_backend,
      dp_attention=bool(e.dp_attention))
  cm.validate_plan(job, plan, cluster)
  check_supported(plan, job, cluster, framework, supports)
  if rule_set is not None:
    try:
      cm.validate_plan(job, plan, cluster, frameworks=(rule_set,))
    except ValueError as err:
      raise ValueError(f"{framework}: {err}") from None
  mode = plan.mode
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
      critic_moe=job.critic is not None and job.critic.n_experts > 0, mode=mode)


def kv_cache_dtype(framework: str, precision: cm.Precision, key: str) -> str | None:
  """SGLang's ``kv_cache_dtype`` for an engine's precision: ``fp8_e4m3`` for an FP8 KV
  cache, None for the job's; refuses weight or GEMM formats (no key here)."""
  if precision.weights is not None or precision.compute != "bf16" or precision.state is not None:
    refuse(framework, "engine.precision", precision, f"only the KV-cache format has a key "
            f"({key})")
  if precision.kv not in (None, "fp8"):
    refuse(framework, "engine.precision.kv", precision.kv, f"{key} takes fp8_e4m3 or the "
            "model's dtype")
  return "fp8_e4m3" if precision.kv == "fp8" else None


def with_layouts(plan: cm.Plan, changes: dict[str, dict[str, Any]],
                 sync_backend: str | None = None) -> cm.Plan:
  """``plan`` with ``{role: {field: value}}`` applied to each role's layouts (both phases) and
  the engine's weight sync set; roles the plan lacks are skipped."""
  roles = []
  for r in plan.roles:
    ch = changes.get(r.role)
    if ch:
      r = dataclasses.replace(r, train=r.train and r.train.replace(**ch),
                              infer=r.infer_layout.replace(**ch))
    roles.append(r)
  plan = plan.replace(roles=tuple(roles))
  if sync_backend is not None:
    plan = plan.replace(engine=plan.engine.replace(sync_backend=sync_backend))
  return plan


def shares_rollout(plan: cm.Plan) -> bool:
  """Whether the actor trains on the rollout pool."""
  return plan.shares_pool("actor")


FP8_TRAINING = cm.Precision(compute="fp8")


def fmt(v: Scalar | None) -> str:
  """A value as a command-line word (``None`` as ``null``, as Hydra reads it)."""
  if v is None:
    return "null"
  if isinstance(v, bool):
    return "True" if v else "False"
  if isinstance(v, float):
    return repr(v)
  return str(v)
