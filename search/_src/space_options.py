"""The search space's variables: their kinds, options and the pool sizes a cluster allows.

See :mod:`search._src.space` for the variables of a family and what each means.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

import costmodel as cm
from costmodel import internal as cmi

# Names of the registered placement families, in registry order.
FAMILIES = tuple(p.name for p in cm.placements())

# Roles that carry their own parallel degrees (the reference follows the actor),
# and those of them that train (the cost model's).
LAYOUT_ROLES = ("actor", "critic", "reward")
TRAINED_ROLES = cmi.TRAINED_ROLES

# Variable kinds.
LOG2 = "log2"   # powers of two; relaxed as log2 of the value
FRAC = "frac"   # a fraction; relaxed through a sigmoid onto the options' range
POOL = "pool"   # GPUs of a pool; relaxed as softmax(logits) * cluster GPUs
CAT = "cat"     # categorical; fixed per start while relaxed


# Formats of the rollout engine a search may choose (SpaceOptions.rollout_precision):
# BF16, or FP8 weights, GEMMs and KV cache (block-scaled FP8 checkpoints served by
# SGLang and vLLM, e.g. DeepSeek-V3's; the weight sync converts, see
# costmodel's precision.conversion_time_s).
ROLLOUT_PRECISIONS = {"bf16": cm.Precision(),
                      "fp8": cm.Precision(weights="fp8", compute="fp8", kv="fp8")}


def has_fp8(hw: cm.Hardware) -> bool:
  """Whether ``hw`` computes in FP8 (:func:`costmodel.internal.precision_available`)."""
  return cmi.precision_available(hw, "fp8")


def powers_of_two(hi: float) -> tuple[int, ...]:
  out, v = [], 1
  while v <= hi:
    out.append(v)
    v *= 2
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class SpaceOptions:
  """The discrete values each layout variable may take.

  Attributes:
    max_tp: Largest tensor-parallel degree of a role (0: the scale-up domain).
    max_pp: Largest pipeline-parallel degree of a role.
    max_cp: Largest context-parallel degree (1 switches CP off).
    max_ep: Largest expert-parallel degree (MoE models only).
    micro_batches: Micro-batch sizes (sequences per GPU), powers of two.
    zero_stages: ZeRO stages tried (1 and/or 3; 3 only with tp = pp = ep = 1).
    recompute: Activation recompute modes (0 none, 1 selective, 2 full).
    offload: Offload settings (0, 1).
    engine_max_tp: Largest engine tensor-parallel degree (0: the domain).
    engine_max_pp: Largest engine pipeline-parallel degree.
    memory_fractions: Engine memory fractions, ascending.
    max_seqs: Engine concurrency caps, powers of two.
    engine_ep: Engine expert-parallel settings tried on MoE models (0: none,
      1: experts sharded over the engine's TP group).
    vpp: Interleaved pipeline chunks per GPU tried for a trained role (1:
      plain 1F1B); a value > 1 only with pp > 1 and ``pp x vpp`` dividing
      the layers.
    engine_dp_attention: Engine data-parallel attention settings tried on
      MLA models (0: off, 1: on); elsewhere it stays off.
    etp: Expert-tensor-parallel settings tried for a trained role of an MoE
      model (0: ETP 1, each expert whole on its rank; 1: ETP = the role's TP,
      Megatron's default when ``expert_tensor_parallel_size`` is unset). It
      acts only with expert parallelism (without EP the experts follow TP).
    rollout_precision: Formats of the rollout engine searched (``bf16``;
      ``fp8``: FP8 weights, GEMMs and KV cache, on accelerators with an FP8
      peak only). BF16 alone by default: an FP8 engine samples from a
      quantised policy, a change of numerics the user must allow (as
      staleness). Each format is a space of its own.
  """

  max_tp: int = 0
  max_pp: int = 16
  max_cp: int = 1
  max_ep: int = 64
  micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
  zero_stages: tuple[int, ...] = (1, 3)
  recompute: tuple[int, ...] = (0, 1, 2)
  offload: tuple[int, ...] = (0, 1)
  engine_max_tp: int = 0
  engine_max_pp: int = 8
  memory_fractions: tuple[float, ...] = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))
  max_seqs: tuple[int, ...] = (32, 64, 128, 256, 512, 1024, 2048, 4096)
  engine_ep: tuple[int, ...] = (0, 1)
  vpp: tuple[int, ...] = (1, 2, 4)
  engine_dp_attention: tuple[int, ...] = (0, 1)
  etp: tuple[int, ...] = (0, 1)
  rollout_precision: tuple[str, ...] = ("bf16",)

  def __post_init__(self):
    for f in ("max_tp", "engine_max_tp"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 0:
        raise ValueError(f"SpaceOptions: {f}={v!r} must be an integer >= 0")
    for f in ("max_pp", "max_cp", "max_ep", "engine_max_pp"):
      v = getattr(self, f)
      if not isinstance(v, int) or v < 1:
        raise ValueError(f"SpaceOptions: {f}={v!r} must be an integer >= 1")
    for f in ("micro_batches", "max_seqs", "vpp"):
      v = tuple(getattr(self, f))
      if not v or any(int(x) != x or x < 1 or (int(x) & (int(x) - 1)) for x in v):
        raise ValueError(f"SpaceOptions: {f}={v!r} must be powers of two >= 1")
      object.__setattr__(self, f, tuple(sorted(int(x) for x in v)))
    for f, allowed in (("zero_stages", (1, 3)), ("recompute", (0, 1, 2)), ("offload", (0, 1)),
                       ("engine_ep", (0, 1)), ("engine_dp_attention", (0, 1)),
                       ("etp", (0, 1))):
      v = tuple(getattr(self, f))
      if not v or any(x not in allowed for x in v):
        raise ValueError(f"SpaceOptions: {f}={v!r} must be a non-empty subset of {allowed}")
      object.__setattr__(self, f, tuple(sorted(set(int(x) for x in v))))
    rp = tuple(self.rollout_precision)
    if not rp or any(x not in ROLLOUT_PRECISIONS for x in rp):
      raise ValueError(f"SpaceOptions: rollout_precision={rp!r} must be a non-empty subset of "
                       f"{tuple(ROLLOUT_PRECISIONS)}")
    object.__setattr__(self, "rollout_precision",
                       tuple(x for x in ROLLOUT_PRECISIONS if x in rp))
    mf = tuple(float(x) for x in self.memory_fractions)
    if not mf or any(not 0.0 < x <= 1.0 for x in mf):
      raise ValueError(f"SpaceOptions: memory_fractions={mf!r} must lie in (0, 1]")
    object.__setattr__(self, "memory_fractions", tuple(sorted(set(mf))))

  @classmethod
  def compact(cls) -> SpaceOptions:
    """A coarser space, small enough to enumerate exhaustively on 8-32 GPUs."""
    return cls(max_pp=4, micro_batches=(1, 2, 4, 8, 16), engine_max_pp=1,
               memory_fractions=(0.5, 0.7, 0.9), max_seqs=(128, 512, 2048))


class Var(NamedTuple):
  """One variable of a family: its name, kind and discrete options (ascending)."""

  name: str
  kind: str
  options: np.ndarray


def default_families(job: cm.RLJob) -> tuple[str, ...]:
  """Families that apply to ``job`` (``split3`` needs a critic)."""
  return tuple(p.name for p in cm.placements(job))


def pool_sizes(cluster: cm.Cluster, nodes: str = "any") -> np.ndarray:
  """GPU counts a pool may hold on ``cluster``.

  Args:
    cluster: The cluster.
    nodes: ``any`` (every count), ``uniform`` (``nnodes x gpus`` with the same
      GPUs on each of at most ``cluster.nodes`` nodes, as Ray placement groups
      of ``num_nodes x num_gpus_per_node`` are written) or ``whole`` (part of
      one node on a one-node cluster, else whole nodes).
  """
  n, g = cluster.n_gpus, cluster.gpus_per_node
  sizes = np.arange(1, n + 1, dtype=np.float64)
  if nodes == "uniform":
    ok = [s <= g or any(s % k == 0 and s // k <= g for k in range(2, cluster.nodes + 1))
          for s in range(1, n + 1)]
    return sizes[np.asarray(ok)]
  if nodes == "whole":
    return sizes if cluster.nodes == 1 else sizes[sizes % g == 0]
  if nodes != "any":
    raise ValueError(f"pool_sizes: nodes={nodes!r} is not one of ('any', 'uniform', 'whole')")
  return sizes


def training_pool_sizes(sizes: np.ndarray, mini_batch_samples: float, max_model: int
                        ) -> np.ndarray:
  """The sizes of ``sizes`` on which some layout passes the rule table's
  ``layout_divides_pool`` and ``dp_divides_mini_batch``: ``size = dp x m`` with
  ``m`` a power of two up to ``max_model`` (the model parallel degrees
  tp x pp x cp, read as ``tp``) and ``dp`` dividing ``mini_batch_samples``."""
  sizes = np.asarray(sizes, np.float64)
  m = np.asarray(powers_of_two(max(max_model, 1)), np.float64)
  fields = {"gpus": sizes[:, None], "tp": m[None], "pp": 1.0, "cp": 1.0, "trained": 1.0,
            "mini_batch_samples": float(mini_batch_samples)}
  ok = cmi.rule_mask("layout", fields, rule_sets=("batch",),
                     only=("layout_divides_pool", "dp_divides_mini_batch"))
  return sizes[np.broadcast_to(ok, (len(sizes), len(m))).any(-1)]


def tp_options(model: cm.ModelSpec, hi: int) -> list[int]:
  """Powers of two up to ``hi`` that pass the rule table's head rules."""
  t = np.asarray(powers_of_two(hi), dtype=np.float64)
  ok = cmi.rule_mask("layout", cmi.layout_fields(model, t, t, 1.0, 1.0, 1.0),
                    only=("tp_divides_heads", "tp_kv_heads"))
  return [int(x) for x in t[ok]]


def nearest_option(x: np.ndarray, var: Var) -> np.ndarray:
  opts = var.options
  if var.kind in (LOG2, POOL):
    d = np.abs(np.log2(np.maximum(x, 1e-9))[..., None] - np.log2(opts))
  else:
    d = np.abs(np.asarray(x)[..., None] - opts)
  return opts[np.argmin(d, -1)]


def cover(need: np.ndarray, options: np.ndarray) -> np.ndarray:
  """The smallest option >= ``need`` (the largest option when none is)."""
  k = np.searchsorted(options, np.asarray(need) - 1e-9)
  return options[np.minimum(k, len(options) - 1)]


def _step_option(x: np.ndarray, options: np.ndarray, step: int) -> np.ndarray:
  """The option ``step`` places away from ``x`` (clamped to the ends)."""
  k = np.searchsorted(options, x)
  k = np.clip(k + step, 0, len(options) - 1)
  return options[k]
