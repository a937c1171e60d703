"""Agreement of two exact scorers' :class:`search._src.evaluate.Scores` on the
same rows: the same plans finite and feasible, equal step times and memory
excess to float32 rounding."""

from __future__ import annotations

import numpy as np


def assert_same_scores(got, want, min_finite: int) -> None:
  """``got`` and ``want`` agree, on at least ``min_finite`` finite plans."""
  ok = np.isfinite(want.step_time_s)
  assert ok.sum() >= min_finite  # the comparison reaches real plans
  np.testing.assert_array_equal(np.isfinite(got.step_time_s), ok)
  np.testing.assert_allclose(got.step_time_s[ok], want.step_time_s[ok], rtol=1e-6)
  np.testing.assert_array_equal(got.feasible, want.feasible)
  np.testing.assert_allclose(got.excess, want.excess, rtol=1e-5, atol=1e-4)
