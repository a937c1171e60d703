"""The Estimate of one RL step: what :func:`costmodel.estimate` returns."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from costmodel._src import pytree
from costmodel._src.step import algorithms
from costmodel._src.units import GIB

PARTS = ("compute", "memory", "comm", "bubble", "overhead")
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache",
                "workspace")


@pytree.pytree_dataclass
class Estimate:
  """Predicted cost of one steady-state RL step.

  Per-stage arrays are indexed like ``stage_names``; per-pool arrays like
  ``pool_names``. Every array is a leaf, so an Estimate can be returned from
  ``jit``, batched by ``vmap`` and differentiated.

  Attributes:
    stage_names: Stage names in topological order.
    stage_pools: Pool each stage runs on (``cpu`` for rule-based rewards).
    pool_names: Pool names.
    mode: Execution mode name.
    step_time_s: Steady-state step time.
    start_s, end_s: Stage start and end within the step's timeline.
    duration_s: [stages] time each stage holds its timeline (``end_s -
      start_s``, read without the schedule's chain of starts).
    time_parts_s: [stages, 5] time split (compute, memory, comm, bubble,
      overhead).
    work_gpu_s: Stage work, GPU-seconds at the hardware's best rate.
    depth_s: Stage critical path.
    memory_bytes: [stages, 7] bytes per GPU (weights, gradients, optimizer,
      activations, logits, kv_cache, workspace).
    memory_limit_bytes: [stages] bytes per GPU available (the HBM of the
      stage's pool's GPU).
    memory_excess: [stages] how far each stage is from fitting, relative to
      its limit: ``relu_tau(need / limit - 1)``, the generation row plus the
      engine's own budget ``relu_tau((engine weights + workspace + one longest
      sequence's KV) / (memory_fraction x HBM) - 1)``. Zero when the plan
      fits; smooth for tau > 0.
    pool_gpus, pool_busy_s, pool_idle_s: Per pool.
    tokens_per_s, samples_per_s, tokens_per_s_per_gpu: Throughput.
    mfu: Model FLOPs of all stages / (step time x GPUs x peak).
    lower_bound_s: Roofline lower bound for the step of this job on these
      GPUs, whatever the layout or mode: the work of generation, inference
      and training at the hardware's best rates over all GPUs (never above
      any plan's step time).
    feasible: Every stage fits in memory and the engines run at least one
      sequence each (concurrency >= 1); at tau = 0 the memory part is exactly
      ``all(memory_excess == 0)``.
    gen_concurrency: Peak running sequences per engine.
    gen_decode_tokens_per_s: Decode tokens/s per engine.
    gen_tail_share: Share of decode time in the long tail.
    gen_mean_concurrency: Mean running sequences per engine.
  """

  stage_names: tuple[str, ...] = pytree.static_field()
  stage_pools: tuple[str, ...] = pytree.static_field()
  pool_names: tuple[str, ...] = pytree.static_field()
  mode: str = pytree.static_field()
  step_time_s: jax.Array = None
  start_s: jax.Array = None
  end_s: jax.Array = None
  duration_s: jax.Array = None
  time_parts_s: jax.Array = None
  work_gpu_s: jax.Array = None
  depth_s: jax.Array = None
  memory_bytes: jax.Array = None
  memory_limit_bytes: jax.Array = None
  memory_excess: jax.Array = None
  pool_gpus: jax.Array = None
  pool_busy_s: jax.Array = None
  pool_idle_s: jax.Array = None
  tokens_per_s: jax.Array = None
  samples_per_s: jax.Array = None
  tokens_per_s_per_gpu: jax.Array = None
  mfu: jax.Array = None
  lower_bound_s: jax.Array = None
  feasible: jax.Array = None
  gen_concurrency: jax.Array = None
  gen_decode_tokens_per_s: jax.Array = None
  gen_tail_share: jax.Array = None
  gen_mean_concurrency: jax.Array = None

  def stage(self, name: str) -> dict:
    """One stage's numbers as a dict of floats (concrete estimates only)."""
    if name not in self.stage_names:
      raise ValueError(f"stage={name!r} is not one of {self.stage_names}")
    i = self.stage_names.index(name)
    parts = np.asarray(self.time_parts_s)[..., i, :]
    out = {"start_s": float(np.asarray(self.start_s)[..., i]),
           "end_s": float(np.asarray(self.end_s)[..., i]),
           "time_s": float(parts.sum()),
           "work_gpu_s": float(np.asarray(self.work_gpu_s)[..., i]),
           "depth_s": float(np.asarray(self.depth_s)[..., i]),
           "memory_bytes": float(np.asarray(self.memory_bytes)[..., i, :].sum()),
           "memory_limit_bytes": float(np.asarray(self.memory_limit_bytes)[..., i])}
    out.update({f"{p}_s": float(v) for p, v in zip(PARTS, parts, strict=True)})
    return out

  @property
  def stage_times_s(self) -> dict:
    """Stage name -> duration (concrete estimates only)."""
    t = np.asarray(self.time_parts_s).sum(-1)
    return {n: float(t[..., i]) for i, n in enumerate(self.stage_names)}

  @property
  def violations(self) -> tuple[str, ...]:
    """Human-readable reasons why the plan does not fit (empty when feasible).

    A stage is reported where its ``memory_excess`` is positive: over its
    limit, or (generation) over the engine's own budget.
    """
    mem = np.asarray(self.memory_bytes)
    lim = np.asarray(self.memory_limit_bytes)
    excess = np.asarray(self.memory_excess)
    if mem.ndim != 2:
      raise ValueError("violations needs a single (unbatched) Estimate")
    out = []
    for i, name in enumerate(self.stage_names):
      if not excess[i] > 0:
        continue
      need = mem[i].sum()
      if need > lim[i]:
        parts = ", ".join(f"{p} {v / GIB:.1f}"
                          for p, v in zip(MEMORY_PARTS, mem[i], strict=True) if v > 0)
        out.append(f"stage {name!r} on pool {self.stage_pools[i]!r} needs "
                   f"{need / GIB:.1f} GiB per GPU ({parts}) but {lim[i] / GIB:.1f} GiB "
                   f"are available: short by {(need - lim[i]) / GIB:.1f} GiB")
      else:
        out.append(f"stage {name!r}: the engine's weights, workspace and one longest "
                   "sequence's KV cache exceed its memory_fraction of HBM")
    if not out and not bool(np.asarray(self.feasible)):
      out.append(f"stage {algorithms.GENERATE!r}: the KV cache holds less than one sequence")
    return tuple(out)

  def summary(self) -> str:
    """A readable table of the step (concrete, unbatched estimates)."""
    parts = np.asarray(self.time_parts_s)
    if parts.ndim != 2:
      raise ValueError("summary needs a single (unbatched) Estimate")
    lines = [f"step {float(self.step_time_s):.2f} s  mode {self.mode}  "
             f"feasible {bool(np.asarray(self.feasible))}  MFU {float(self.mfu):.1%}  "
             f"lower bound {float(self.lower_bound_s):.2f} s",
             f"throughput {float(self.tokens_per_s):,.0f} tok/s  "
             f"{float(self.tokens_per_s_per_gpu):,.1f} tok/s/GPU  "
             f"{float(self.samples_per_s):.2f} samples/s",
             f"generation: {float(self.gen_concurrency):.0f} seqs/engine peak, "
             f"{float(self.gen_decode_tokens_per_s):,.0f} decode tok/s/engine, "
             f"tail {float(self.gen_tail_share):.0%} of decode",
             "",
             f"{'stage':<14}{'pool':<8}{'start':>8}{'end':>8}{'time':>8}"
             + "".join(f"{p:>9}" for p in PARTS) + f"{'mem GiB':>9}{'limit':>7}"]
    mem = np.asarray(self.memory_bytes).sum(-1) / GIB
    lim = np.asarray(self.memory_limit_bytes) / GIB
    for i, name in enumerate(self.stage_names):
      lines.append(
          f"{name:<14}{self.stage_pools[i]:<8}{float(self.start_s[i]):>8.1f}"
          f"{float(self.end_s[i]):>8.1f}{parts[i].sum():>8.1f}"
          + "".join(f"{v:>9.1f}" for v in parts[i])
          + (f"{mem[i]:>9.1f}{lim[i]:>7.0f}" if self.stage_pools[i] != "cpu" else
             f"{'-':>9}{'-':>7}"))
    lines.append("")
    for j, p in enumerate(self.pool_names):
      lines.append(f"pool {p:<8} {float(self.pool_gpus[j]):>6.0f} GPUs  busy "
                   f"{float(self.pool_busy_s[j]):>8.1f} s  "
                   f"idle {float(self.pool_idle_s[j]):>8.1f} s")
    for v in (self.violations if not bool(np.asarray(self.feasible)) else ()):
      lines.append("INFEASIBLE: " + v)
    return "\n".join(lines)

  def replace(self, **changes) -> Estimate:
    return dataclasses.replace(self, **changes)
