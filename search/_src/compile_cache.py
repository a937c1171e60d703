"""The persistent JAX compilation cache and the compile-time clock of a search.

A search compiles its relaxed loop and exact evaluators once per job shape;
the persistent cache keeps the compiled programs on disk so a later process
searching a job of the same shape loads them instead. It is on by default in
``~/.cache/rlcost/jax``; the environment variable ``RLCOST_JAX_CACHE`` names
another directory, or switches the cache off with ``off`` (or an empty value).
Its ``traced`` folder keeps the traced relaxed loops and exact evaluators
(:mod:`search._src.trace_cache`), so a later process need not trace them.

:class:`CompileClock` adds up the wall seconds JAX reports spending on
tracing, lowering and compiling (``jax.monitoring`` events ``/jax/core/compile/*``)
while it is open, so a search reports compile time apart from search time.
"""

from __future__ import annotations

import os
import threading
import time

import jax
from jax import monitoring

from costmodel import internal as cmi

ENV = "RLCOST_JAX_CACHE"
_OFF = ("", "0", "off", "none", "false")


def default_dir() -> str:
  """``$RLCOST_JAX_CACHE`` when set, else ``~/.cache/rlcost/jax`` (under
  ``$XDG_CACHE_HOME`` when that is set)."""
  if ENV in os.environ:
    return os.environ[ENV]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "rlcost", "jax")


def enable(path: str | bool | None = None) -> str | None:
  """Points JAX's persistent compilation cache at ``path``.

  Args:
    path: A directory; None or True: :func:`default_dir`; False or ``off``:
      no cache (a cache set earlier in the process is switched off).

  Returns:
    The directory in use, or None when the cache is off.
  """
  if path is None or path is True:
    path = default_dir()
  if path is False or str(path).strip().lower() in _OFF:
    jax.config.update("jax_compilation_cache_dir", None)
    return None
  path = os.path.expanduser(str(path))
  os.makedirs(path, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", path)
  # The exact evaluators compile in about a second; keep them too (and
  # whatever faster programs a lower threshold set earlier keeps).
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    min(0.2, jax.config.jax_persistent_cache_min_compile_time_secs))
  return path


# XLA options of the search's programs (defined with the cost model's, which
# its calibration and anchor inference use too).
FAST_COMPILE = cmi.xla_options.FAST_COMPILE
FORWARD = cmi.xla_options.FORWARD
# The exact programs' options by kind: the ranking program scores every row of
# the discrete phases, the whole-estimate program few rows (the top plans, the
# rules of thumb). A search whose discrete phases alone score few rows compiles
# its ranking program for compile time too (``SharedSpace.fast_ranking``).
EXACT = {"ranking": FORWARD, "estimates": FAST_COMPILE}

_EVENTS = ("/jax/core/compile/",)
_lock = threading.Lock()
_open: list[CompileClock] = []
_registered = False


def _listener(event: str, duration: float, **_) -> None:
  if event.startswith(_EVENTS):
    end = time.perf_counter()
    with _lock:
      for clock in _open:
        clock.add(end - duration, end)


class CompileClock:
  """Wall seconds spent tracing, lowering or compiling while the clock is open.

  Compilations that overlap in time (programs compiled in threads) count
  once: the clock measures the union of their intervals.

  >>> with CompileClock() as clock:
  ...   _ = jax.jit(lambda x: x + 1)(1.0)
  >>> clock.seconds >= 0
  True
  """

  def __init__(self):
    self._intervals: list[tuple[float, float]] = []

  def add(self, start: float, end: float) -> None:
    """Records that compilation ran from ``start`` to ``end`` (perf_counter)."""
    self._intervals.append((start, end))

  @property
  def seconds(self) -> float:
    total, reach = 0.0, -float("inf")
    for start, end in sorted(self._intervals):
      if end > reach:
        total += end - max(start, reach)
        reach = end
    return total

  def __enter__(self) -> CompileClock:
    global _registered
    with _lock:
      if not _registered:
        monitoring.register_event_duration_secs_listener(_listener)
        _registered = True
      _open.append(self)
    return self

  def __exit__(self, *exc) -> None:
    with _lock:
      _open.remove(self)
