"""The compile-time clock of a search counts overlapping compilations once."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from search._src import compile_cache


def test_overlapping_intervals_count_once():
  clock = compile_cache.CompileClock()
  for start, end in ((0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.8)):
    clock.add(start, end)
  assert clock.seconds == 4.0


def test_clock_sees_a_compilation_and_stops_when_closed():
  f = jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.25)
  with compile_cache.CompileClock() as clock:
    f(jnp.float32(0.5))
  seen = clock.seconds
  assert seen > 0
  jax.jit(lambda x: jnp.cos(x) - 2.5)(jnp.float32(0.5))
  assert clock.seconds == seen
