"""A baseline planner: a dynamic program over cuts of the stage graph.

In the style of RLinf's open auto-placement planner (its idea, not its code:
github.com/RLinf/RLinf, ``toolkits/auto_placement/placement.py`` at commit
6c6b2c04030b9eefb09707d40e916d4f22ace8b2, where a collocated merge of two
sub-schedules adds their costs and a disaggregated one pipelines them, the
slower side's per-batch cost setting the pace), run on this project's cost
model. The stage graph of an RL step is cut recursively; at each cut the two
sides are either *colocated* (one GPU set, time-shared: their times add) or
*split* onto disjoint GPU sets (their times overlap where the stage graph lets
them: the larger one counts), with every split of the GPUs tried; the leaves
choose each stage group's layout.

Only cuts that map onto a placement the project expresses
(:func:`costmodel.placements` of the job, filtered by the framework and the
modes the user allows, :func:`search._src.frameworks.families_for`) are
admitted; the cut tree of each family and its leaves are those of
:mod:`search._src.cut_tree`.

Every pool combination the family's space allows is a split the DP tries; the
leaves are evaluated once per pool size and shared by all the splits that use
that size (the DP's memo). Sizes are visited coarse to fine (multiples of
large powers of two first), so a time budget cuts the finest splits, not whole
families. The DP's best few combinations per family, each with the product of
its leaves' best layouts, are scored by the exact evaluator (like for like with
random search and annealing). The weight sync and the colocated switch belong
to no leaf: only the exact scoring sees them.

The DP runs as a search method (:mod:`search._src.methods.cut_dp`,
``search.run("cut_dp", ...)``); here are the seeds it gives the gradient
search.
"""

from __future__ import annotations

import numpy as np

from search._src import cut_tree
from search._src import evaluate
from search._src import space as space_lib
from search._src import valid_space


def family_seeds(fs: space_lib.FamilySpace, ev: evaluate.Evaluator, keep: int = 2,
                 combos: int = 8) -> np.ndarray:
  """The DP's final candidates in one family, for a search to start from.

  The coarsest level of pool sizes only (multiples of the largest powers of
  two, every leaf's layouts scored there), with ``ev`` (an evaluator with
  whole estimates, ``full=True``) shared with the caller: the products of each
  leaf's ``keep`` best layouts on the DP's ``combos`` best pool combinations,
  valid rows only ([N, V]; empty when the family holds no combination).
  """
  if not ev.full:
    raise ValueError("cut_dp.family_seeds: the evaluator needs full=True (stage times)")
  grid = fs.pool_grid()
  # The coarsest level that holds a complete plan: only its pool combinations
  # are built (a 16,384-GPU split has 229,000 of them in all).
  for level in sorted(set(valid_space.pool_level(grid).tolist()), reverse=True):
    blocks = valid_space.Blocks(fs, min_level=level)
    if len(blocks.pools):
      break
  else:
    return np.zeros((0, len(fs.vars)))
  run = cut_tree.CutFamily(fs, ev.eff, ev.chunk, keep, ev=ev, blocks=blocks)
  level = run.first_level()
  cut_tree.score_leaves([run], [(lvl, 0, k, key) for lvl, k, key in run.items() if lvl >= level],
                        ev.chunk)
  return cut_tree.best_candidates(run, keep, combos)
