"""Expert-parallel token exchange: dispatch and combine of routed tokens.

Each EP rank sends every token it holds to the ranks of the ``top_k`` experts
chosen for it, and receives the outputs back (combine). Inside a scale-up
domain the copies travel over NVLink; a group spanning ``D`` domains sends
each token once per remote domain it needs (DeepEP, Megatron's HybridEP: one
RDMA copy per destination node, fanned out over NVLink there), so the
inter-domain volume per rank is

    S_tok * (D - 1) * (1 - (1 - 1/D) ** top_k)

(the expected number of other domains holding at least one of the token's
experts, under uniform routing), against ``S_tok * top_k * (n - k)/n`` for a
flat all-to-all. The intra-domain part moves ``S_tok * top_k * (k - 1)/n``.
Both parts run concurrently (the longer one sets the time), plus the ring
latencies of :mod:`collectives`.

References: DeepSeek-V3 technical report, Section 3.2.2 (node-limited
dispatch; its mechanism, not its cost figures); deepseek-ai/DeepEP README.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel._src.ops import smooth
from costmodel._src.specs.hardware import Hardware


def remote_domains(domains, top_k: int) -> jax.Array:
  """Expected other domains a token's ``top_k`` experts fall in (uniform routing)."""
  d = jnp.maximum(jnp.asarray(domains, float), 1.0)
  return (d - 1.0) * (1.0 - jnp.exp(top_k * jnp.log1p(-1.0 / jnp.maximum(d, 1.0 + 1e-6))))


def exchange_time(token_bytes, top_k: int, n, domain: float, hw: Hardware, eff,
                  tau=0.0) -> jax.Array:
  """One dispatch (or one combine) over an EP group of ``n`` ranks.

  Args:
    token_bytes: Bytes of the tokens one rank holds (before routing copies).
    top_k: Experts per token.
    n: EP group size (may be fractional in relaxed mode).
    domain: Ranks per scale-up domain.
    hw: The accelerator.
    eff: Efficiency parameters (link efficiency multiplier).
    tau: Smoothing temperature.

  Returns:
    Seconds; zero for a group of one rank.
  """
  n = jnp.maximum(jnp.asarray(n, float), 1.0)
  k = jnp.clip(smooth.smin(n, jnp.asarray(domain, float), tau), 1.0, n)
  big_n = n / k
  bu = hw.scaleup_bandwidth_bytes_per_s * hw.scaleup_efficiency * eff.link_efficiency
  bo = hw.scaleout_bandwidth_bytes_per_s * hw.scaleout_efficiency * eff.link_efficiency
  intra = token_bytes * top_k * (k - 1.0) / n
  inter = token_bytes * remote_domains(big_n, top_k)
  lat = (k - 1.0) * hw.scaleup_latency_s + (big_n - 1.0) * hw.scaleout_latency_s
  return lat + smooth.smax(intra / bu, inter / bo, tau)
