"""The compile-time clock counts overlapping compilations once; the trace cache
serves a traced program to a later process."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from search._src import compile_cache
from search._src import program_cache
from search._src import trace_cache


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


def test_trace_cache_serves_a_later_process(tmp_path):
  traces = []

  @functools.partial(jax.jit, static_argnames=("k",), compiler_options=compile_cache.FAST_COMPILE)
  def f(k, x, y):
    traces.append(k)  # runs once per trace
    return (x * k + y["a"], jnp.sum(x))

  args = (jnp.arange(4.0), {"a": 2.0})
  call = lambda k: trace_cache.call("test_f", f, (k,), k, args, compile_cache.FAST_COMPILE)
  previous = jax.config.jax_compilation_cache_dir
  try:
    compile_cache.enable(str(tmp_path))
    first = call(3.0)
    program_cache.clear()  # as a new process would start
    again = call(3.0)
    assert traces == [3.0]  # the second call read the traced program from disk
    other = call(5.0)  # another static value: another program
    assert traces == [3.0, 5.0]
  finally:
    jax.config.update("jax_compilation_cache_dir", previous)
  for a, b in zip(first, again, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(other[0]), np.arange(4.0) * 5.0 + 2.0)
  assert len(list((tmp_path / "traced").glob("test_f-*.jaxexport"))) == 2
  # Without a cache directory the function is called as it is.
  assert trace_cache.call("test_f", f, (7.0,), 7.0, args, compile_cache.FAST_COMPILE)[1] == 6.0
  assert traces[-1] == 7.0


def test_on_traced_runs_after_tracing_and_before_compiling(tmp_path):
  events = []

  @functools.partial(jax.jit, static_argnames=("k",))
  def f(k, x):
    events.append(("trace", k))
    return x * k

  x = jnp.arange(3.0)
  clock_at_callback = []

  def on_traced():
    events.append("traced")
    clock_at_callback.append(clock.seconds)

  previous = jax.config.jax_compilation_cache_dir
  try:
    for directory in (None, str(tmp_path)):  # ahead of time in memory; through the disk cache
      jax.config.update("jax_compilation_cache_dir", directory)
      program_cache.clear()
      events.clear()
      k = 2.0 if directory is None else 4.0
      with compile_cache.CompileClock() as clock:
        out = trace_cache.call("test_g", f, (k,), k, (x,), {}, on_traced=on_traced)
        np.testing.assert_array_equal(np.asarray(out), np.arange(3.0) * k)
        assert events == [("trace", k), "traced"]
        again = trace_cache.call("test_g", f, (k,), k, (x,), {}, on_traced=on_traced)
      # The second call found the compiled program: no trace, the callback at once.
      assert events == [("trace", k), "traced", "traced"]
      np.testing.assert_array_equal(np.asarray(again), np.asarray(out))
      # XLA compiled after the callback: the clock had seen no compilation of the program yet
      # (tracing is counted, so compare with the total, which adds the compilation).
      assert clock_at_callback[-2] < clock.seconds
  finally:
    jax.config.update("jax_compilation_cache_dir", previous)
