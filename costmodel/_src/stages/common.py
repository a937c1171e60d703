"""Results shared by every stage model, and the per-operation time helpers."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src import collectives
from costmodel._src import roofline
from costmodel._src.cluster import Cluster
from costmodel._src.efficiency import Efficiency
from costmodel._src.layers import ForwardWork


class Memory(NamedTuple):
  """Bytes per GPU held while a stage runs."""

  weights: jax.Array
  gradients: jax.Array
  optimizer: jax.Array
  activations: jax.Array
  logits: jax.Array
  kv_cache: jax.Array
  workspace: jax.Array

  @property
  def total(self) -> jax.Array:
    return sum(self)

  @classmethod
  def zeros(cls) -> Memory:
    z = jnp.zeros(())
    return cls(z, z, z, z, z, z, z)


class StageCost(NamedTuple):
  """Cost of one stage on its GPUs.

  ``compute_s + memory_s + comm_s + bubble_s + overhead_s == time_s``.
  ``work_gpu_s`` is the stage's work in GPU-seconds at peak efficiency
  (FLOPs or bytes at the hardware's best measured rate), ``depth_s`` its
  critical path: with P GPUs the stage takes at least max(W/P, D).
  """

  time_s: jax.Array
  compute_s: jax.Array
  memory_s: jax.Array
  comm_s: jax.Array
  bubble_s: jax.Array
  overhead_s: jax.Array
  work_gpu_s: jax.Array
  depth_s: jax.Array
  flops: jax.Array
  memory: Memory
  extras: dict


def make_cost(compute_s, memory_s, comm_s, bubble_s, overhead_s, work_gpu_s, depth_s,
              flops, memory: Memory, **extras) -> StageCost:
  """Builds a :class:`StageCost` whose total is the sum of its parts."""
  total = compute_s + memory_s + comm_s + bubble_s + overhead_s
  return StageCost(total, compute_s, memory_s, comm_s, bubble_s, overhead_s,
                   work_gpu_s, depth_s, flops, memory, extras)


def scale_cost(cost: StageCost, factor) -> StageCost:
  """A stage repeated ``factor`` times (time parts and work scale; memory not)."""
  return cost._replace(
      time_s=cost.time_s * factor, compute_s=cost.compute_s * factor,
      memory_s=cost.memory_s * factor, comm_s=cost.comm_s * factor,
      bubble_s=cost.bubble_s * factor, overhead_s=cost.overhead_s * factor,
      work_gpu_s=cost.work_gpu_s * factor, depth_s=cost.depth_s * factor,
      flops=cost.flops * factor)


class PassTime(NamedTuple):
  compute_s: jax.Array
  memory_s: jax.Array
  comm_s: jax.Array


def pass_time(work: ForwardWork, flop_multiplier, cluster: Cluster, eff: Efficiency,
              tp, cp, ep, tau, collective_multiplier=1.0,
              compute_efficiency=1.0) -> PassTime:
  """Time of a (forward, or forward+backward) pass from its :class:`ForwardWork`.

  GEMMs and attention follow the roofline; TP all-reduces, EP all-to-alls and
  the CP ring are added, the CP ring overlapping the attention core.

  Args:
    work: Forward work of the GPU.
    flop_multiplier: FLOPs relative to one forward (3 for fwd+bwd, 4 with
      full recompute).
    collective_multiplier: Collectives relative to one forward (2 for
      fwd+bwd, 3 with full recompute).
    compute_efficiency: Extra multiplier on achieved FLOP/s.
  """
  hw = cluster.accelerator
  mm = roofline.roofline(work.matmul_flops * flop_multiplier,
                         work.weight_bytes * flop_multiplier,
                         work.rows, hw, eff, n_ops=work.n_gemms * flop_multiplier, tau=tau,
                         peak_scale=compute_efficiency)
  # Element-wise kernels run between the GEMMs: memory bound, not overlapped.
  elem_s = roofline.memory_time(work.activation_bytes * flop_multiplier, hw, eff,
                                n_ops=work.n_gemms * flop_multiplier)
  attn_s = roofline.compute_time(work.attention_flops * flop_multiplier, work.rows, hw, eff,
                                 peak_scale=eff.attention_efficiency * compute_efficiency)
  domain = cluster.scaleup_domain
  tp_s = work.tp_collectives * collective_multiplier * collectives.collective_time(
      "all_reduce", work.tp_bytes, tp, domain, hw, eff, tau)
  ep_s = work.ep_collectives * collective_multiplier * collectives.collective_time(
      "all_to_all", work.ep_bytes, ep, domain, hw, eff, tau)
  # CP ring: (cp - 1) hops of the local KV chunk per layer, hidden behind the
  # attention core where it is longer.
  link = hw.scaleup_bandwidth_bytes_per_s * hw.scaleup_efficiency * eff.link_efficiency
  ring = work.layers * collective_multiplier * collectives.flat_time(
      "p2p", work.cp_bytes, 2.0, link, hw.scaleup_latency_s) * (jnp.asarray(cp, float) - 1.0)
  cp_exposed = jnp.maximum(ring - attn_s, 0.0)
  return PassTime(mm.compute_s + attn_s, mm.memory_s + elem_s, tp_s + ep_s + cp_exposed)
