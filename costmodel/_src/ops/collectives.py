"""Collective communication time by the alpha-beta (Hockney) model.

For a group of ``n`` ranks moving a buffer of ``S`` bytes:

    =============== ===================================== ============================
    collective       bandwidth term (NCCL bus factor)       latency steps (ring)
    =============== ===================================== ============================
    all-reduce       2 (n-1)/n * S / B                      2 (n-1)
    all-gather       (n-1)/n * S / B   (S = gathered size)  n-1
    reduce-scatter   (n-1)/n * S / B   (S = input size)     n-1
    all-to-all       (n-1)/n * S / B   (S = per-rank send)  n-1
    broadcast        S / B                                  n-1
    point-to-point   S / B                                  1
    =============== ===================================== ============================

``B`` is the achieved link bandwidth (line rate times an efficiency). A group
larger than the scale-up domain is hierarchical: with ``k`` ranks per domain
and ``N = n / k`` domains, all-reduce is an intra-domain reduce-scatter, an
inter-domain all-reduce of ``S / k`` per rank over the NICs, then an
intra-domain all-gather; all-gather and reduce-scatter likewise split into an
inter part on ``S / k`` and an intra part on ``S``; for all-to-all the share
``(n - k) / n`` of the bytes crosses the NICs while the rest stays inside.

The group size may be a real number (relaxed search); the formulas are smooth
in it and exact at integers.

References: Thakur, Rabenseifner & Gropp, IJHPCA 2005; NVIDIA nccl-tests
doc/PERFORMANCE.md (bus bandwidth).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from costmodel._src import pytree
from costmodel._src.ops import efficiency as eff_lib
from costmodel._src.ops import smooth
from costmodel._src.specs.hardware import Hardware

Kind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
               "broadcast", "p2p"]
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")

# (bus factor numerator multiplier, latency-step multiplier) for ring algorithms.
_BUS = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def bus_factor(kind: str, n) -> jax.Array:
  """NCCL's bus-bandwidth factor f: time = S * f / busbw."""
  pytree.check_one_of("collective", KINDS, kind=kind)
  n = jnp.asarray(n, dtype=float)
  if kind in _BUS:
    return _BUS[kind] * (n - 1.0) / n
  return jnp.ones_like(n)  # broadcast, p2p


def flat_time(kind: str, nbytes, n, bandwidth_bytes_per_s, latency_s) -> jax.Array:
  """Alpha-beta time of a flat (single-level) ring collective.

  ``t = steps * alpha + f(n) * S / B``; zero for a group of one rank.
  """
  n = jnp.asarray(n, dtype=float)
  f = bus_factor(kind, n)
  if kind in ("broadcast", "p2p"):
    # f = 1 for any n > 1, but a group of one rank moves nothing.
    f = jnp.where(n > 1, f, 0.0)
  if kind == "p2p":
    steps = jnp.where(n > 1, 1.0, 0.0)
  elif kind == "all_reduce":
    steps = 2.0 * (n - 1.0)
  else:
    steps = n - 1.0
  return steps * latency_s + f * nbytes / bandwidth_bytes_per_s


def collective_time(kind: str, nbytes, n, domain: float, hw: Hardware,
                    eff: eff_lib.Efficiency, tau=0.0) -> jax.Array:
  """Time of one collective over ``n`` ranks, hierarchical past ``domain``.

  Args:
    kind: One of :data:`KINDS`.
    nbytes: Buffer size S in bytes (see the module table for its meaning).
    n: Group size (ranks); may be fractional in relaxed mode.
    domain: Ranks per scale-up domain (NVLink).
    hw: The accelerator (link bandwidths and latencies).
    eff: Efficiency parameters (a global link-efficiency multiplier).
    tau: Smoothing temperature for the split of the group over domains.

  Returns:
    Seconds. Zero for a group of one rank.
  """
  pytree.check_one_of("collective", KINDS, kind=kind)
  n = jnp.maximum(jnp.asarray(n, dtype=float), 1.0)
  k = smooth.smin(n, jnp.asarray(domain, dtype=float), tau)
  k = jnp.clip(k, 1.0, n)
  big_n = n / k  # domains spanned
  bu = hw.scaleup_bandwidth_bytes_per_s * hw.scaleup_efficiency * eff.link_efficiency
  bo = hw.scaleout_bandwidth_bytes_per_s * hw.scaleout_efficiency * eff.link_efficiency
  au, ao = hw.scaleup_latency_s, hw.scaleout_latency_s
  if kind == "p2p":
    # Inside the domain when the pair fits in it, else over the NIC.
    intra = flat_time("p2p", nbytes, n, bu, au)
    inter = flat_time("p2p", nbytes, n, bo, ao)
    return jnp.where(big_n > 1.0 + 1e-6, inter, intra)
  if kind == "broadcast":
    return flat_time("broadcast", nbytes, k, bu, au) * (k > 1) + flat_time(
        "broadcast", nbytes, big_n, bo, ao) * (big_n > 1)
  if kind == "all_to_all":
    lat = (k - 1.0) * au + (big_n - 1.0) * k * ao
    intra_bytes = (k - 1.0) / n * nbytes
    inter_bytes = (n - k) / n * nbytes
    return lat + smooth.smax(intra_bytes / bu, inter_bytes / bo, tau)
  if kind == "all_reduce":
    intra = flat_time("reduce_scatter", nbytes, k, bu, au) + flat_time(
        "all_gather", nbytes, k, bu, au)
    inter = flat_time("all_reduce", nbytes / k, big_n, bo, ao)
    return intra + inter
  # all_gather / reduce_scatter
  intra = flat_time(kind, nbytes, k, bu, au)
  inter = flat_time(kind, nbytes / k, big_n, bo, ao)
  return intra + inter
