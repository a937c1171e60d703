"""A lower bound on a family's step time over its whole valid space.

The valid space of a family is, for each pool combination, a product of
blocks (:class:`~search._src.valid_space.Blocks`): the engine's layout, each
role group's layout. Each stage belongs to one block's leaf
(:mod:`search._src.cut_dp`), and the schedule gives the step a floor made of
leaf times:

* synchronous, without streaming (``colocated``, ``split``, ``split3``): every
  stage on a non-rollout pool consumes the rollouts and the pool runs its
  stages one at a time, so the step is at least the generation's duration plus
  the busiest non-rollout pool's stages; on one pool (``colocated``) it is at
  least the sum of all stages;
* off-policy or streaming: the step is at least the busiest pool's time
  (:func:`costmodel._src.step.schedule.steady_state_s`).

The weight sync, the colocated switch and the controller's own stages only
add to it. If a leaf's stage durations depend on its own layout and pool sizes
alone, the least of each leaf's times over its valid layouts, combined this
way and minimised over the pool combinations, is a bound no valid plan beats:
every leaf row of every pool combination is scored once, the same work as the
cut DP without a budget. A leaf alone on its pool holds that pool's memory
alone, so there only layouts that fit count (a plan that fits has every stage
within memory); leaves that share a pool share its memory, so there every
layout counts, fitting or not.

The premise is checked, not assumed: every leaf's rows are scored again next
to the heaviest layouts of the other leaves on a sample of pool sizes (the
bound's own and some spread over the rest), and their durations must not move
(nor the memory of a leaf alone on its pool); a family where they do is
refused.

The bound runs as a search method (:mod:`search._src.methods.bound`,
``search.run("bound", ...)``); here are its pieces.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from search._src import cut_tree
from search._src import space as space_lib

# Pool sizes per leaf whose rows are scored again next to heavy neighbours.
CHECK_KEYS = 6
# Relative change of a leaf's time (or absolute change of its memory excess)
# above which the leaf depends on another block.
CHECK_TOLERANCE = 1e-5


class FamilyBound(NamedTuple):
  """A proven lower bound on one family's step time.

  Attributes:
    family: The placement family.
    bound_s: No valid plan of the family has a shorter step (inf: none fits).
    pools: Pool name -> GPUs of the pool combination that attains the bound.
    fits_pools: Pools whose leaf is alone there, so only its layouts that fit
      in memory count (on the others every layout counts).
    rows: Leaf rows scored (the check's included).
    wall_time_s: Wall time of the call.
    empty: Why the family holds no valid plan (``bound_s`` is then inf), else None.
  """

  family: str
  bound_s: float
  pools: dict
  fits_pools: tuple[str, ...]
  rows: int
  wall_time_s: float
  empty: str | None = None


def check_mode(fs: space_lib.FamilySpace) -> None:
  """Refuses fused inference (its stages' durations shrink with the engine's
  decode tail)."""
  if fs.structure.placement.mode.fuse_inference:
    raise ValueError(f"lower_bound: family={fs.family!r} fuses inference into the "
                     "generation tail, so an inference stage's duration depends on the "
                     "engine's layout; the bound needs each leaf's times to be its own")


def _moved(run: cut_tree.CutFamily, keys: list[tuple[int, tuple]], alone: set[int]
           ) -> tuple[float, float, int]:
  """Largest relative change of a leaf's time, and absolute change of the
  memory excess of a leaf in ``alone``, when the other leaves take their
  heaviest layouts, over the leaf rows of ``keys``; and the rows scored."""
  dt = dx = 0.0
  rows = 0
  for k, key in keys:
    light, heavy = run.leaf_rows(k, key), run.leaf_rows(k, key, heavy=True)
    out = []
    for values in (light, heavy):
      _, names, dur, ex = run.ev.stage_scores(values)
      out.append(run.leaf_cost(k, names, dur, ex))
    (c0, _, x0), (c1, _, x1) = out
    both = np.isfinite(c0) & np.isfinite(c1)
    if (np.isfinite(c0) != np.isfinite(c1)).any():
      dt = np.inf
    elif both.any():
      dt = max(dt, float(np.max(np.abs(c1[both] - c0[both]) / np.maximum(c0[both], 1e-9))))
    if k in alone:
      dx = max(dx, float(np.max(np.abs(x1 - x0), initial=0.0)))
    rows += 2 * len(light)
  return dt, dx, rows


def _check_keys(run: cut_tree.CutFamily, p: int, n: int) -> list[tuple[int, tuple]]:
  """(leaf, key) pairs to check: each leaf's keys of pool combination ``p``
  and up to ``n - 1`` more, spread over its sorted keys."""
  out = []
  for k, (_, _, deps, first) in enumerate(run.leaves):
    keys = sorted(first)
    mine = tuple(run.blocks.pools[p][deps])
    picks = [keys[i] for i in np.unique(np.linspace(0, len(keys) - 1, n - 1).astype(int))]
    out += [(k, key) for key in dict.fromkeys([mine, *picks])]
  return out


def family_bound(run: cut_tree.CutFamily) -> FamilyBound:
  """The bound of one family whose every leaf layout ``run`` has scored
  (:func:`search._src.cut_tree.score_leaves` with ``keep=1``): the least leaf
  times combined per pool combination and minimised, its premise checked
  (``wall_time_s`` 0: the caller's clock).

  Raises:
    ValueError: for a leaf layout whose stage time is NaN, or leaves whose
      stage times (or a lone leaf's memory) depend on other leaves' layouts.
  """
  family = run.fs.family
  on_pool = [run.pool_of_leaf(name) for name, *_ in run.leaves]
  alone = {k for k, pool in enumerate(on_pool) if on_pool.count(pool) == 1}
  rows = run.ev.count
  if any(np.isnan(v).any() for v in run.low.values()):
    raise ValueError(f"lower_bound: family={family!r} has a leaf layout whose stage time "
                     "is NaN")
  total = run.totals(lambda k, key: run.low[(k, key)][1 if k in alone else 0])
  p = int(np.argmin(total))
  dt, dx, checked = _moved(run, _check_keys(run, p, CHECK_KEYS), alone)
  if dt > CHECK_TOLERANCE or dx > CHECK_TOLERANCE:
    what = "stage time" if dt > CHECK_TOLERANCE else "memory excess"
    raise ValueError(f"lower_bound: family={family!r}: a leaf's {what} changes by "
                     f"{max(dt, dx):.2%} with the other leaves' layouts, so the per-leaf "
                     "bound does not hold")
  pools = {n: int(g) for n, g in zip(run.pool_names, run.blocks.pools[p], strict=True)}
  return FamilyBound(family=family, bound_s=float(total[p]), pools=pools,
                     fits_pools=tuple(sorted({on_pool[k] for k in alone})),
                     rows=rows + checked, wall_time_s=0.0)
