"""K-fold cross-validation of the calibration prior, on the fit cases only.

The fit cases are dealt into ``folds`` seeded folds, stratified by group. For
every offered prior weight and every fold, the parameters are fitted on the
other folds and the left-out fold is predicted; all these fits, and the final
fit on every case for each prior, run side by side as one batch of
:func:`~costmodel._src.fit.objective_lib.fit_batch`. The score of a prior is the
mean over groups of the median absolute log error of its out-of-fold
predictions (each case is predicted once, by the fit that did not see it): the
quantity the fidelity report judges on held-out data. Only the fit cases enter;
the caller's held-out cases are never seen here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from costmodel._src.fit import objective as objective_lib
from costmodel._src.fit.validation.cases import Case


def fold_ids(cases: Sequence[Case], folds: int, seed: int = 0) -> np.ndarray:
  """A seeded fold number per case, dealt round-robin within each group.

  Raises:
    ValueError: for fewer than two folds or more folds than cases.
  """
  if folds < 2 or folds > len(cases):
    raise ValueError(f"calibrate: folds={folds} must lie in [2, {len(cases)}] (the fit cases)")
  rng = np.random.default_rng(seed)
  out = np.zeros(len(cases), int)
  start = 0
  for group in sorted({c.group for c in cases}):
    idx = [i for i, c in enumerate(cases) if c.group == group]
    for k, i in enumerate(rng.permutation(idx)):
      out[i] = (start + k) % folds
    start += len(idx)  # the next group's first case goes to the next fold
  return out


def score(errors: np.ndarray, groups: Sequence[str]) -> float:
  """Mean over groups of the median absolute log error."""
  e = np.abs(np.asarray(errors))
  groups = np.asarray(groups)
  return float(np.mean([np.median(e[groups == g]) for g in sorted(set(groups.tolist()))]))


def choose(objective, weights: np.ndarray, priors: np.ndarray, delta: float, steps: int,
           learning_rate: float, folds: int, seed: int):
  """Fits every prior on all cases and, with several priors, on every fold.

  Args:
    objective: The :class:`~costmodel._src.fit.objective.Objective` of the
      fit cases.
    weights: Case weights (summing to one).
    priors: Prior weights offered.
    delta: Huber delta of the loss.
    steps: Adam steps.
    learning_rate: Adam learning rate.
    folds: Number of folds.
    seed: Seed of the folds.

  Returns:
    ``(prior, z, history, scores)``: the chosen prior, its parameters fitted
    on all cases (dict of scalars), its loss history and the score of every
    prior (empty with a single prior).
  """
  n_p = priors.size
  sets_w, sets_p = [weights] * n_p, list(priors)
  if n_p > 1:
    ids = fold_ids(objective.cases, folds, seed)
    for p in priors:
      for k in range(folds):
        w = np.where(ids == k, 0.0, weights)
        sets_w.append(w / w.sum())
        sets_p.append(p)
  sets_w = np.stack(sets_w)
  z, history = objective_lib.fit_batch(objective, sets_w, np.asarray(sets_p),
                                   np.full(len(sets_p), delta), steps, learning_rate)
  best, scores = 0, {}
  if n_p > 1:
    _, _, errors = objective(z, np.ones_like(sets_w), np.full(len(sets_p), delta),
                             with_errors=True)
    groups = [c.group for c in objective.cases]
    for j, p in enumerate(priors):
      oof = np.empty(len(groups))
      for k in range(folds):
        oof[ids == k] = errors[n_p + j * folds + k, ids == k]
      scores[float(p)] = score(oof, groups)
    best = int(np.argmin([np.nan_to_num(scores[float(p)], nan=np.inf) for p in priors]))
  return float(priors[best]), {f: v[best] for f, v in z.items()}, history[:, best], scores


def source_ids(sources: Sequence[str]) -> tuple[np.ndarray, list[str]]:
  """A fold number per case, one fold per source, and the sources in fold order."""
  names = sorted(set(sources))
  index = {s: k for k, s in enumerate(names)}
  return np.asarray([index[s] for s in sources], int), names


def by_source(objective, weights: np.ndarray, sources: Sequence[str], priors: np.ndarray,
              delta: float, steps: int, learning_rate: float):
  """Leave one source out: for every prior, one fit on every case and one fit
  per source on the others, side by side in one batch.

  A source with every case of the fit (nothing left to fit on) is refused.
  The score of a prior is :func:`score` of the out-of-source errors (each case
  predicted by the fit that did not see its source).

  Returns:
    ``(prior, z, history, scores, in_errors, out_errors, held)``: the chosen
    prior, its parameters fitted on every case (dict of scalars), its loss
    history, the score of every prior, the log error of every case in sample
    and out of source at the chosen prior, and per source the parameters
    fitted without it (dict of scalars).

  Raises:
    ValueError: for fewer than two sources.
  """
  ids, names = source_ids(sources)
  if len(names) < 2:
    raise ValueError(f"calibrate: leaving one source out needs two or more sources, got "
                     f"{names}")
  n_s = len(names)
  sets_w, sets_p = [], []
  for p in priors:
    sets_w.append(weights)
    sets_p.append(p)
    for k in range(n_s):
      w = np.where(ids == k, 0.0, weights)
      sets_w.append(w / w.sum())
      sets_p.append(p)
  sets_w = np.stack(sets_w)
  z, history = objective_lib.fit_batch(objective, sets_w, np.asarray(sets_p),
                                       np.full(len(sets_p), delta), steps, learning_rate)
  _, _, errors = objective(z, np.ones_like(sets_w), np.full(len(sets_p), delta),
                           with_errors=True)
  groups = [c.group for c in objective.cases]
  scores, outs = {}, []
  for j, p in enumerate(priors):
    base = j * (n_s + 1)
    out = np.empty(len(groups))
    for k in range(n_s):
      out[ids == k] = errors[base + 1 + k, ids == k]
    outs.append(out)
    scores[float(p)] = score(out, groups)
  best = int(np.argmin([np.nan_to_num(scores[float(p)], nan=np.inf) for p in priors]))
  row = best * (n_s + 1)
  held = {name: {f: v[row + 1 + k] for f, v in z.items()} for k, name in enumerate(names)}
  return (float(priors[best]), {f: v[row] for f, v in z.items()}, history[:, row], scores,
          errors[row], outs[best], held)
