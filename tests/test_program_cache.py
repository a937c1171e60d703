"""The one in-memory cache of compiled programs: built once per kind and key,
a concurrent caller waits for the first build, clear() forgets."""

import threading

import jax.numpy as jnp
import numpy as np

from search._src import exact_programs
from search._src import program_cache


def test_a_program_is_built_once_and_a_second_caller_waits():
  program_cache.clear()
  started, release = threading.Event(), threading.Event()
  builds, hits = [], []

  def build():
    builds.append(1)
    started.set()
    release.wait(5.0)
    return "program"

  got = []
  first = threading.Thread(target=lambda: got.append(program_cache.get("test", 1, build)))
  first.start()
  started.wait(5.0)
  second = threading.Thread(target=lambda: got.append(
      program_cache.get("test", 1, build, on_hit=lambda: hits.append(1))))
  second.start()
  release.set()
  first.join()
  second.join()
  assert got == ["program", "program"] and builds == [1] and hits == [1]
  assert program_cache.keys("test") == (("test", 1),)
  assert program_cache.get("test", 2, lambda: "other") == "other"  # another key, another build
  program_cache.clear()
  assert program_cache.keys() == ()
  assert program_cache.get("test", 1, lambda: "rebuilt") == "rebuilt"
  program_cache.clear()


def test_lean_programs_are_keyed_by_shape():
  program_cache.clear()
  f = lambda x: jnp.sum(x * 2.0)
  small = exact_programs.compiled_once(("sum",), f, (np.ones(3, np.float32),))
  again = exact_programs.compiled_once(("sum",), f, (np.zeros(3, np.float32),))
  assert small is again
  large = exact_programs.compiled_once(("sum",), f, (np.ones(5, np.float32),))
  assert large is not small
  assert float(large(np.ones(5, np.float32))) == 10.0
  assert float(small(np.arange(3, dtype=np.float32))) == 6.0
  assert len(program_cache.keys("lean")) == 2
  assert program_cache.shape_key((np.ones(3, np.float32),)) != program_cache.shape_key(
      (np.ones(3, np.float64),))
  program_cache.clear()
