"""Results shared by every stage model, and the per-operation time helpers."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src.ops import collectives
from costmodel._src.ops import layers
from costmodel._src.ops import moe as moe_lib
from costmodel._src.ops import roofline
from costmodel._src.ops import smooth
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.ops.layers import ForwardWork
from costmodel._src.specs.cluster import Cluster


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


def _gemms_compute_s(gemms, flop_multiplier, hw, eff: Efficiency, peak_scale, dtype: str):
  """Summed compute time of GEMMs of several shapes, timed as one stacked array
  (one traced computation for all shapes instead of one per shape)."""
  if not gemms:
    return jnp.zeros(())
  fields = jnp.broadcast_arrays(*(jnp.asarray(x, float) for g in gemms for x in g))
  width = len(layers.Gemm._fields)
  f, rows, n, k = (jnp.stack(fields[i::width]) for i in range(width))
  return jnp.sum(roofline.compute_time(f * flop_multiplier, rows, hw, eff, peak_scale, n=n, k=k,
                                       dtype=dtype), axis=0)


def gemm_roofline(work: ForwardWork, hw, eff: Efficiency, flop_multiplier=1.0, tau=0.0,
                  peak_scale=1.0, dtype: str = "bf16", extra_compute_s=0.0,
                  extra_bytes=0.0, imbalance=None) -> roofline.RooflineTime:
  """Roofline time of a pass's weight GEMMs, dense and routed experts apart.

  Each GEMM shape is timed at its own M, N and K
  (:func:`efficiency.gemm_efficiency`): the dense GEMMs against the dense
  weight reads (plus ``extra_compute_s`` and ``extra_bytes``, e.g. attention
  and KV reads in decode), the grouped expert GEMMs at the tokens per expert
  against the touched experts' weights. The busiest expert rank sets the
  pace: expert compute is scaled by ``Efficiency.moe_imbalance``.

  Args:
    work: Forward work of the GPU.
    flop_multiplier: FLOPs (and weight passes) relative to one forward.
    dtype: GEMM input format (:mod:`precision`).
    imbalance: Override of the expert-load factor (default the parameter).
  """
  dense_c = _gemms_compute_s(work.dense_gemms, flop_multiplier, hw, eff, peak_scale, dtype)
  dense_b = (work.weight_bytes - work.expert_weight_bytes) * flop_multiplier + extra_bytes
  dense = roofline.roofline(None, dense_b, None, hw, eff,
                            n_ops=(work.n_gemms - work.n_expert_gemms) * flop_multiplier,
                            tau=tau, compute_s=dense_c + extra_compute_s)
  if not work.expert_gemms:
    return dense
  imb = eff.moe_imbalance if imbalance is None else imbalance
  exp_c = imb * _gemms_compute_s(work.expert_gemms, flop_multiplier, hw, eff, peak_scale, dtype)
  exp = roofline.roofline(None, work.expert_weight_bytes * flop_multiplier, None, hw, eff,
                          n_ops=jnp.maximum(work.n_expert_gemms, 1.0) * flop_multiplier,
                          tau=tau, compute_s=exp_c)
  return roofline.RooflineTime(*(a + b for a, b in zip(dense, exp, strict=True)))


def ep_time(work: ForwardWork, cluster: Cluster, eff: Efficiency, ep, tau,
            collective_multiplier=1.0):
  """Expert dispatch + combine and the expert-TP reduction of a pass.

  Hierarchical when the EP group spans scale-up domains
  (:func:`moe.exchange_time`: one copy per remote domain); the busiest rank
  receives ``moe_imbalance`` times the mean.
  """
  if not work.expert_gemms:
    return jnp.zeros(())
  hw = cluster.accelerator
  domain = cluster.scaleup_domain
  token_bytes = work.ep_bytes / max(work.top_k, 1) * eff.moe_imbalance
  a2a = work.ep_collectives * collective_multiplier * moe_lib.exchange_time(
      token_bytes, work.top_k, ep, domain, hw, eff, tau)
  etp_s = work.etp_collectives * collective_multiplier * collectives.collective_time(
      "all_reduce", work.etp_bytes, work.etp, domain, hw, eff, tau)
  return a2a + etp_s


def pass_time(work: ForwardWork, flop_multiplier, cluster: Cluster, eff: Efficiency,
              tp, cp, ep, tau, collective_multiplier=1.0,
              compute_efficiency=1.0, dtype: str = "bf16", ep_overlap=0.0) -> PassTime:
  """Time of a (forward, or forward+backward) pass from its :class:`ForwardWork`.

  GEMMs and attention follow the roofline (:func:`gemm_roofline`); TP
  all-reduces, EP all-to-alls and the CP ring are added, the CP ring
  overlapping the attention core. A share ``ep_overlap`` of the all-to-all
  hides behind the pass's compute (Megatron's
  ``--overlap-moe-expert-parallel-comm``, DualPipe-style), never more than
  the compute there is to hide it.

  Args:
    work: Forward work of the GPU.
    flop_multiplier: FLOPs relative to one forward (3 for fwd+bwd, 4 with
      full recompute).
    collective_multiplier: Collectives relative to one forward (2 for
      fwd+bwd, 3 with full recompute).
    compute_efficiency: Extra multiplier on achieved FLOP/s.
    dtype: GEMM input format (:mod:`precision`).
    ep_overlap: Share of the expert all-to-all hidden behind compute.
  """
  hw = cluster.accelerator
  mm = gemm_roofline(work, hw, eff, flop_multiplier, tau, compute_efficiency, dtype)
  # Element-wise kernels run between the GEMMs: memory bound, not overlapped.
  elem_s = roofline.memory_time(work.activation_bytes * flop_multiplier, hw, eff,
                                n_ops=work.n_gemms * flop_multiplier)
  attn_s = roofline.compute_time(work.attention_flops * flop_multiplier, work.rows, hw, eff,
                                 peak_scale=eff.attention_efficiency * compute_efficiency)
  domain = cluster.scaleup_domain
  tp_s = work.tp_collectives * collective_multiplier * collectives.collective_time(
      "all_reduce", work.tp_bytes, tp, domain, hw, eff, tau)
  ep_s = ep_time(work, cluster, eff, ep, tau, collective_multiplier)
  # Router, token sort and dispatcher bookkeeping: a fixed cost per MoE layer
  # per pass (forward, backward, recompute).
  moe_fixed = work.moe_layers * collective_multiplier * eff.moe_layer_overhead_s
  compute = mm.compute_s + attn_s + moe_fixed
  ep_exposed = ep_s - smooth.smin(jnp.asarray(ep_overlap, float) * ep_s, compute, tau)
  # CP ring: (cp - 1) hops of the local KV chunk per layer, hidden behind the
  # attention core where it is longer.
  link = hw.scaleup_bandwidth_bytes_per_s * hw.scaleup_efficiency * eff.link_efficiency
  ring = work.layers * collective_multiplier * collectives.flat_time(
      "p2p", work.cp_bytes, 2.0, link, hw.scaleup_latency_s) * (jnp.asarray(cp, float) - 1.0)
  cp_exposed = jnp.maximum(ring - attn_s, 0.0)
  return PassTime(compute, mm.memory_s + elem_s, tp_s + ep_exposed + cp_exposed)
