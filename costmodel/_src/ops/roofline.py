"""Roofline time of one operation on one GPU.

    time = max(flops / (peak * eff_flop), bytes / (bw * eff_mem))

with the efficiencies from :func:`efficiency.saturating_efficiency`, a smooth
function of the operation's ideal time. The maximum is exact when ``tau == 0``
and a p-norm surrogate otherwise (see :mod:`smooth`). Both the exact and the
relaxed model call this one function.

References: Williams, Waterman & Patterson, "Roofline", CACM 2009.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from costmodel._src.ops import efficiency as eff_lib
from costmodel._src.ops import smooth
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.hardware import Hardware


class RooflineTime(NamedTuple):
  """Time of an operation, split by the bound that sets it."""

  time_s: jax.Array
  compute_s: jax.Array  # share of time_s attributed to compute
  memory_s: jax.Array  # share of time_s attributed to memory


def compute_time(flops, rows, hw: Hardware, eff: eff_lib.Efficiency,
                 peak_scale=1.0, n=None, k=None, dtype: str = "bf16") -> jax.Array:
  """Time of GEMMs totalling ``flops`` of shape ``rows`` x ``n`` x ``k``.

  Args:
    flops: Total floating-point operations.
    rows: Rows M of each GEMM (tokens); short M runs at lower efficiency.
    hw: The accelerator.
    eff: Efficiency parameters.
    peak_scale: Multiplier on the peak (e.g. attention efficiency).
    n, k: Output width and reduction depth (None: wide).
    dtype: GEMM input format (``bf16``, ``fp8``, ``fp4``): its own peak and
      plateau (:mod:`precision`).
  """
  peak_d = precision_lib.peak_flops(hw, dtype)
  speedup = peak_d / hw.peak_flops_per_s
  e = eff_lib.gemm_efficiency(rows, hw.matmul_efficiency_max * precision_lib.plateau(eff, dtype),
                              eff, n=n, k=k, speedup=speedup)
  return flops / (peak_d * peak_scale * e)


def memory_time(nbytes, hw: Hardware, eff: eff_lib.Efficiency, n_ops=1.0,
                width_bytes=None) -> jax.Array:
  """Time to stream ``nbytes`` through HBM in ``n_ops`` equal transfers.

  ``width_bytes``, when given, is the output width of the GEMM whose operands
  these are, in bytes of its input format: a narrow GEMM streams its weights
  with few bytes in flight (:func:`efficiency.stream_efficiency`).

  Zero for zero bytes, with finite gradients there (double ``where``: the
  efficiency of an empty transfer underflows, and ``0 / e`` would give NaN
  gradients).
  """
  ideal = nbytes / hw.hbm_bandwidth_bytes_per_s
  ok = ideal > 0
  safe_ideal = jnp.where(ok, ideal, 1.0)
  e = eff_lib.saturating_efficiency(safe_ideal / n_ops, hw.hbm_efficiency_max,
                                    eff.memory_half_time_s, eff.memory_exponent)
  if width_bytes is not None:
    e = eff_lib.stream_efficiency(width_bytes, e, eff)
  return jnp.where(ok, safe_ideal / e, 0.0)


def roofline(flops, nbytes, rows, hw: Hardware, eff: eff_lib.Efficiency, n_ops=1.0,
             tau=0.0, peak_scale=1.0, n=None, k=None, dtype: str = "bf16",
             compute_s=None) -> RooflineTime:
  """Roofline time of ``n_ops`` GEMM-like operations with ``rows`` rows each.

  ``flops`` and ``nbytes`` are totals over the ``n_ops`` operations; the
  memory efficiency depends on the bytes each one moves. ``n``, ``k`` and
  ``dtype`` set the GEMM shape and format (:func:`compute_time`);
  ``compute_s``, when given, is the compute time already summed over GEMMs
  of several shapes (``flops`` and ``rows`` are then ignored).

  Returns:
    A :class:`RooflineTime` whose ``compute_s + memory_s == time_s``; the split
    follows which bound dominates (smoothly, by a logistic of the log ratio).

  Example:
    >>> t = roofline(2 * 4096**3, 3 * 2 * 4096**2, 4096, hw.get("H100"), Efficiency())
  """
  t_c = (compute_time(flops, rows, hw, eff, peak_scale, n=n, k=k, dtype=dtype)
         if compute_s is None else compute_s)
  width_bytes = None if n is None else n * precision_lib.DTYPE_BYTES[dtype]
  t_m = memory_time(nbytes, hw, eff, n_ops, width_bytes)
  t = smooth.smax(t_c, t_m, tau)
  w = jax.nn.sigmoid(8.0 * (smooth.safe_log(t_c) - smooth.safe_log(t_m)))
  w = jnp.where((t_c == 0) & (t_m == 0), 0.5, w)
  return RooflineTime(t, t * w, t * (1.0 - w))
