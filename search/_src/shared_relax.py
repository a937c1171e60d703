"""The relaxed loop of several families' starts as one batch of a shared space
(:class:`search._src.shared.SharedSpace`), cut into one part per core.
"""

from __future__ import annotations

import concurrent.futures
import threading

import jax
import numpy as np

import costmodel as cm
from search._src import relax
from search._src import sharding
from search._src.shared import SharedSpace


def run(shared: SharedSpace, eff: cm.Efficiency, starts, cfg: relax.RelaxConfig,
        on_traced=None) -> list[relax.RelaxOutput]:
  """The relaxed loop of every family's starts in one batch.

  Args:
    shared: The space.
    eff: Efficiency parameters.
    starts: ``(x0, lo, hi)`` of each family, in the order of ``shared.spaces``.
    cfg: The relaxed phase's schedules.
    on_traced: As in :func:`search._src.relax.run`.

  Returns:
    One :class:`~search._src.relax.RelaxOutput` per family, in its own columns.
  """
  x0, lo, hi = widen_starts(shared, starts)
  return per_family(shared, starts, _run_parts(shared, eff, x0, lo, hi, cfg, on_traced))


def widen_starts(shared: SharedSpace, starts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(x0, lo, hi)`` of every family's ``starts`` (as in :func:`run`), widened
  to the shared columns and stacked in the order of ``shared.spaces``."""
  parts = [[], [], []]
  for k, arrays in enumerate(starts):
    for i, a in enumerate(arrays):
      parts[i].append(shared.widen(k, np.asarray(a, np.float32), relaxed=True))
  return tuple(np.concatenate(p, 0) for p in parts)


def per_family(shared: SharedSpace, starts, out: relax.RelaxOutput) -> list[relax.RelaxOutput]:
  """``out`` (rows of :func:`widen_starts`, a history column per family) cut
  into one :class:`~search._src.relax.RelaxOutput` per family, in its own
  columns."""
  outs, at = [], 0
  for k, (a, *_) in enumerate(starts):
    rows, cols = slice(at, at + len(a)), shared.columns[k]
    at += len(a)
    outs.append(relax.RelaxOutput(x=out.x[rows][:, cols], values=out.values[rows][:, cols],
                                  step_time_s=out.step_time_s[rows],
                                  penalty=out.penalty[rows], history_s=out.history_s[:, k]))
  return outs


def _parts(rows: int) -> int:
  """Parts :func:`run` cuts ``rows`` starts into: one per core on one device,
  else one (sharded over the devices)."""
  return min(sharding.cores() if jax.device_count() == 1 else 1, rows)


def rows_per_device(rows: int) -> int:
  """Starts each device's relaxed program takes when :func:`run` runs ``rows``."""
  part = -(-rows // _parts(rows))
  return -(-part // jax.device_count())


def _run_parts(shared, eff, x0, lo, hi, cfg, on_traced) -> relax.RelaxOutput:
  """:func:`search._src.relax.run` of the rows cut into one equal part per core,
  each part in a thread of its own (XLA runs one program on one core, so the
  parts run side by side; the program compiles once, the other threads wait for
  it); on several devices the rows are sharded instead, in one part."""
  n = _parts(x0.shape[0])
  size = -(-x0.shape[0] // n)
  pad = lambda a: np.concatenate([a, np.repeat(a[-1:], n * size - len(a), 0)], 0)
  x0, lo, hi = pad(x0), pad(lo), pad(hi)
  cut = lambda a, i: a[i * size:(i + 1) * size]
  # Every part takes the same path of the trace cache (an AOT program), so they
  # share it. Whichever part's thread builds it tells ``on_traced`` (once) as
  # soon as it is traced; the others would only hear of it once it compiled.
  told = threading.Lock()

  def notify():
    if on_traced is not None and told.acquire(blocking=False):
      on_traced()

  with concurrent.futures.ThreadPoolExecutor(n) as pool:
    outs = list(pool.map(lambda i: relax.run(shared, shared.job, shared.cluster, eff,
                                             cut(x0, i), cut(lo, i), cut(hi, i), cfg,
                                             on_traced=notify), range(n)))
  cat = lambda field: np.concatenate([getattr(o, field) for o in outs], 0)
  return relax.RelaxOutput(x=cat("x"), values=cat("values"), step_time_s=cat("step_time_s"),
                           penalty=cat("penalty"),
                           history_s=np.min(np.stack([o.history_s for o in outs]), axis=0))
