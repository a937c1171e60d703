"""Calibration: fit the efficiency parameters to measured times with optax.

The measurements are :class:`~costmodel._src.fit.validation.cases.Case` objects:
a published or measured value and a function that predicts it from an
:class:`Efficiency` through the same cost model the estimate uses. The fit
minimises a weighted loss of the log errors over the fitted cases plus a prior
that keeps each parameter near its default:

    loss = sum_i w_i rho(log pred_i - log meas_i) + prior * sum_j (z_j - z0_j)^2

where ``z`` is the unconstrained parameter: ``logit`` of a fraction (so no
efficiency leaves (0, 1)) and ``log`` of a positive quantity (so no overhead
turns negative). ``rho`` is the squared error or its Huber form (quadratic up to
``huber_delta``, linear beyond, so a few rows the model cannot express do not
drag every parameter), and the weights ``w`` sum to one, equal per case, per
group or per source row. The prior's weight may be chosen by k-fold
cross-validation on the fit cases alone (:mod:`costmodel._src.fit.cross_validate`).
Held-out cases are predicted before and after the fit and never influence it.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from typing import NamedTuple

import jax
import numpy as np

from costmodel._src.fit import cross_validate
from costmodel._src.fit import objective as objective_lib
from costmodel._src.fit.objective import FRACTIONS  # noqa: F401  (re-exported)
from costmodel._src.fit.objective import WEIGHTINGS  # noqa: F401  (re-exported)
from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.validation.report import relative_error
from costmodel._src.ops.efficiency import Efficiency

DEFAULT_FIT = ("matmul_half_rows", "attention_efficiency", "memory_half_time_s",
               "link_efficiency", "dp_overlap", "decode_step_overhead_s",
               "generate_overhead_s", "infer_overhead_s", "train_overhead_s",
               "sync_overhead_s", "sync_per_tensor_s", "switch_overhead_s", "train_efficiency",
               "cpu_optimizer_params_per_s", "decode_seq_overhead_s", "decode_rank_overhead_s",
               "eager_layer_overhead_s", "cross_node_step_overhead_s", "sync_per_bucket_s",
               "sync_export_bytes_per_s", "batch_transfer_bytes_per_s", "train_call_overhead_s",
               "controller_return_bytes_per_s")
LOSSES = ("squared", "huber")

class CaseError(NamedTuple):
  row_id: str
  group: str
  label: str
  published: float
  before: float
  after: float
  fitted: bool

  @property
  def error_before(self) -> float:
    return relative_error(self.before, self.published)

  @property
  def error_after(self) -> float:
    return relative_error(self.after, self.published)


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
  """Fitted parameters and the error report.

  Attributes:
    efficiency: The fitted :class:`Efficiency`.
    initial: The starting parameters.
    rows: Per-case errors before and after, fitted or held out.
    loss_history: The loss at each optimisation step.
    prior: The prior weight used (the cross-validated choice when several
      were offered).
    cv_scores: Cross-validation score per prior weight offered (mean over
      groups of the median absolute log error of the out-of-fold cases);
      empty when one prior was given.
  """

  efficiency: Efficiency
  initial: Efficiency
  rows: tuple[CaseError, ...]
  loss_history: np.ndarray
  prior: float = 0.01
  cv_scores: dict = dataclasses.field(default_factory=dict)

  def summary_table(self) -> list[dict]:
    """Median and worst absolute error per (part, group), before and after."""
    out = []
    for part in ("fit", "held-out"):
      sel = [r for r in self.rows if r.fitted == (part == "fit")]
      for group in sorted({r.group for r in sel}):
        g = [r for r in sel if r.group == group]
        b = np.abs([r.error_before for r in g])
        a = np.abs([r.error_after for r in g])
        out.append({"part": part, "group": group, "n": len(g),
                    "median_before": float(np.median(b)), "worst_before": float(b.max()),
                    "median_after": float(np.median(a)), "worst_after": float(a.max())})
    return out

  def __str__(self) -> str:
    lines = [f"{'part':<9}{'group':<12}{'n':>3}{'median before':>15}{'worst before':>14}"
             f"{'median after':>14}{'worst after':>13}"]
    for s in self.summary_table():
      lines.append(f"{s['part']:<9}{s['group']:<12}{s['n']:>3}{s['median_before']:>15.1%}"
                   f"{s['worst_before']:>14.1%}{s['median_after']:>14.1%}"
                   f"{s['worst_after']:>13.1%}")
    return "\n".join(lines)


def split_cases(cases: Sequence[Case], holdout_fraction: float = 0.3, seed: int = 0):
  """A seeded split into (fit, held_out), stratified by group."""
  if not 0.0 <= holdout_fraction < 1.0:
    raise ValueError(f"holdout_fraction={holdout_fraction} must lie in [0, 1)")
  rng = np.random.default_rng(seed)
  fit, held = [], []
  for group in sorted({c.group for c in cases}):
    g = [c for c in cases if c.group == group]
    idx = rng.permutation(len(g))
    n_held = int(round(holdout_fraction * len(g)))
    if len(g) - n_held < 1:
      n_held = len(g) - 1
    held += [g[i] for i in idx[:n_held]]
    fit += [g[i] for i in idx[n_held:]]
  return fit, held


def calibrate(fit: Sequence[Case], held_out: Sequence[Case] = (),
              efficiency: Efficiency | None = None, fields: Sequence[str] = DEFAULT_FIT,
              steps: int = 300, learning_rate: float = 0.05,
              prior: float | Sequence[float] = 0.01, *, loss: str = "squared",
              huber_delta: float = 0.2, weighting: str = "case", folds: int = 3,
              cv_seed: int = 0) -> CalibrationResult:
  """Fits ``fields`` of the efficiency parameters to the ``fit`` cases.

  Args:
    fit: Cases to fit.
    held_out: Cases only reported, before and after; they influence nothing.
    efficiency: Starting parameters (defaults if None).
    fields: Names of the :class:`Efficiency` fields to fit.
    steps: Adam steps.
    learning_rate: Adam learning rate (on the unconstrained parameters).
    prior: Weight of the pull towards the starting values, or several weights
      to choose from by ``folds``-fold cross-validation on ``fit``.
    loss: ``squared`` log error, or ``huber`` (quadratic up to
      ``huber_delta`` in log error, linear beyond).
    huber_delta: Log error at which the Huber loss turns linear (0.2: about
      20% off).
    weighting: ``case`` (every case alike), ``group`` (every group the same
      total weight) or ``row`` (every source row the same total weight).
    folds: Folds of the cross-validation (used only with several priors).
    cv_seed: Seed of the folds.

  Returns:
    A :class:`CalibrationResult`.

  Raises:
    ValueError: for no fit cases, an unknown field, loss or weighting, a
      non-positive published value, a negative prior or too few cases to fold.
  """
  if not fit:
    raise ValueError("calibrate: fit must hold at least one case")
  if loss not in LOSSES:
    raise ValueError(f"calibrate: loss={loss!r} must be one of {LOSSES}")
  if loss == "huber" and not huber_delta > 0:
    raise ValueError(f"calibrate: huber_delta={huber_delta} must be > 0")
  eff0 = efficiency if efficiency is not None else Efficiency()
  known = {f.name for f in dataclasses.fields(Efficiency)}
  for f in fields:
    if f not in known:
      raise ValueError(f"calibrate: field={f!r} is not an Efficiency field ({sorted(known)})")
  for c in list(fit) + list(held_out):
    if not np.isfinite(c.published) or c.published <= 0:
      raise ValueError(f"calibrate: case {c.row_id} published={c.published} must be > 0")
  priors = np.atleast_1d(np.asarray(prior, float))
  if priors.size == 0 or (priors < 0).any():
    raise ValueError(f"calibrate: prior={prior} must be one or more weights >= 0")
  delta = huber_delta if loss == "huber" else 1e6
  # In float32 the jitted gradient of some runs overflows (DeepSeek-V3 on 96
  # H20: NaN and inf in 18 of the 22 default fields, where the same gradient
  # evaluated op by op, or in float64, is finite), and one such row used to
  # zero those fields' gradient for every row. The fit runs in float64.
  with jax.enable_x64(True):
    objective = objective_lib.Objective(fit, eff0, tuple(fields))
    weights = objective_lib.case_weights(fit, weighting)
    chosen, z, history, scores = cross_validate.choose(
        objective, weights, priors, delta, steps, learning_rate, folds, cv_seed)
    fitted = objective.make(z)
    fitted = dataclasses.replace(fitted, **{f: float(getattr(fitted, f)) for f in fields})
  rows = []
  for c, is_fit in [(c, True) for c in fit] + [(c, False) for c in held_out]:
    rows.append(CaseError(c.row_id, c.group, c.label, float(c.published),
                          float(c.predict(eff0)), float(c.predict(fitted)), is_fit))
  return CalibrationResult(fitted, eff0, tuple(rows), history, chosen, scores)


class SourceRow(NamedTuple):
  """One case predicted with the defaults, fitted on every source, and fitted
  on every source but its own."""

  row_id: str
  group: str
  kind: str
  label: str
  source: str
  published: float
  default: float
  in_sample: float
  out_of_source: float

  @property
  def error_default(self) -> float:
    return relative_error(self.default, self.published)

  @property
  def error_in_sample(self) -> float:
    return relative_error(self.in_sample, self.published)

  @property
  def error_out_of_source(self) -> float:
    return relative_error(self.out_of_source, self.published)


@dataclasses.dataclass(frozen=True)
class SourceValidation:
  """Leave-one-source-out validation (:func:`validate_by_source`).

  Attributes:
    efficiency: Parameters fitted on every source at the chosen prior.
    initial: The starting parameters (the prior's centre).
    rows: One :class:`SourceRow` per case.
    prior: The prior weight that predicts held-out sources best.
    scores: Score per prior offered (mean over groups of the median absolute
      log error out of source).
    loss_history: The loss of the fit on every source at each step.
    held_out: Per source, the parameters fitted on every other source.
  """

  efficiency: Efficiency
  initial: Efficiency
  rows: tuple[SourceRow, ...]
  prior: float
  scores: dict
  loss_history: np.ndarray
  held_out: dict = dataclasses.field(default_factory=dict)

  def sources(self) -> list[str]:
    return sorted({r.source for r in self.rows})


def validate_by_source(cases: Sequence[Case], efficiency: Efficiency | None = None,
                       fields: Sequence[str] = DEFAULT_FIT, steps: int = 200,
                       learning_rate: float = 0.05, prior: float | Sequence[float] = 0.01, *,
                       loss: str = "huber", huber_delta: float = 0.2,
                       weighting: str = "group") -> SourceValidation:
  """Leaves each source out in turn: fits ``fields`` on the cases of every
  other source and predicts its cases; fits once more on every case.

  The source of a case is the document its figures come from
  (:func:`~costmodel._src.fit.validation.sources.source_of`). With several
  ``prior`` weights, the one whose out-of-source predictions score best is
  chosen, and ``efficiency`` of the result is the fit on every case at it.

  Raises:
    ValueError: as :func:`calibrate`, for a case of no known source, or fewer
      than two sources.
  """
  from costmodel._src.fit.validation import sources as sources_lib  # pylint: disable=g-import-not-at-top
  if not cases:
    raise ValueError("calibrate: cases must hold at least one case")
  if loss not in LOSSES:
    raise ValueError(f"calibrate: loss={loss!r} must be one of {LOSSES}")
  eff0 = efficiency if efficiency is not None else Efficiency()
  known = {f.name for f in dataclasses.fields(Efficiency)}
  for f in fields:
    if f not in known:
      raise ValueError(f"calibrate: field={f!r} is not an Efficiency field ({sorted(known)})")
  for c in cases:
    if not np.isfinite(c.published) or c.published <= 0:
      raise ValueError(f"calibrate: case {c.row_id} published={c.published} must be > 0")
  priors = np.atleast_1d(np.asarray(prior, float))
  if priors.size == 0 or (priors < 0).any():
    raise ValueError(f"calibrate: prior={prior} must be one or more weights >= 0")
  srcs = [sources_lib.source_of(c.row_id) for c in cases]
  delta = huber_delta if loss == "huber" else 1e6
  with jax.enable_x64(True):
    objective = objective_lib.Objective(cases, eff0, tuple(fields))
    weights = objective_lib.case_weights(cases, weighting)
    chosen, z, history, scores, e_in, e_out, held_z = cross_validate.by_source(
        objective, weights, srcs, priors, delta, steps, learning_rate)

    def concrete(zz):
      eff = objective.make(zz)
      return dataclasses.replace(eff, **{f: float(getattr(eff, f)) for f in fields})

    fitted = concrete(z)
    held = {s: concrete(zz) for s, zz in held_z.items()}
  rows = []
  for c, s, a, b in zip(cases, srcs, e_in, e_out, strict=True):
    rows.append(SourceRow(c.row_id, c.group, sources_lib.stage_kind(c), c.label, s,
                          float(c.published), float(c.predict(eff0)),
                          float(c.published * np.exp(a)), float(c.published * np.exp(b))))
  return SourceValidation(fitted, eff0, tuple(rows), chosen, scores, history, held)
