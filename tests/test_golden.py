"""The estimate of 320 seeded, varied plans agrees with the golden file.

The golden file (``tests/data/golden_estimates.json``, written by
``python tests/golden_cases.py --write``) holds, per case, the step time,
stage timeline, time split, memory and feasibility, or the validation error
of an invalid plan. A reorganisation of the cost model must keep every number
to 1e-6 relative; a change of a rule that makes a plan valid or invalid is
listed in ``VALIDITY_CHANGES`` with the reason.
"""

from __future__ import annotations

import json

import golden_cases
import numpy as np
import pytest

GOLDEN = json.loads(golden_cases.GOLDEN.read_text())
NAMES = sorted(GOLDEN)

# Cases whose validity was changed on purpose: name -> why.
VALIDITY_CHANGES: dict[str, str] = {}

_ARRAYS = ("step_time_s", "start_s", "end_s", "time_parts_s", "memory_bytes",
           "memory_limit_bytes", "pool_busy_s", "lower_bound_s", "mfu", "gen_concurrency")


def test_golden_file_covers_the_space():
  valid = [n for n in NAMES if "error" not in GOLDEN[n]]
  assert len(NAMES) == golden_cases.N_CASES
  assert len(valid) >= 200
  families = {n.split("-")[1] for n in valid}
  assert families == set(golden_cases._FAMILIES)
  algorithms = {n.split("-")[2] for n in valid}
  assert {"ppo", "grpo", "dapo", "rloo", "remax"} <= algorithms
  assert any(GOLDEN[n]["feasible"] for n in valid)
  assert not all(GOLDEN[n]["feasible"] for n in valid)
  assert any("mixtral" in n or "a3b" in n or "deepseek" in n for n in valid)


@pytest.mark.parametrize("index", range(0, golden_cases.N_CASES, 16))
def test_golden_estimates(index):
  for i in range(index, min(index + 16, golden_cases.N_CASES)):
    name, job, plan, cluster = golden_cases.case(i)
    assert name in GOLDEN, f"case {i} is named {name!r}, not in the golden file"
    want = GOLDEN[name]
    got = golden_cases.outputs(job, plan, cluster)
    if name in VALIDITY_CHANGES:
      assert ("error" in want) != ("error" in got), name
      continue
    assert ("error" in got) == ("error" in want), (name, got.get("error"), want.get("error"))
    if "error" in want:
      continue
    assert got["stage_names"] == want["stage_names"], name
    assert got["stage_pools"] == want["stage_pools"], name
    assert got["feasible"] == want["feasible"], name
    # Feasible exactly when no stage exceeds its memory and the engines run a sequence.
    fits = all(v == 0.0 for v in got["memory_excess"])
    assert got["feasible"] == (fits and got["gen_concurrency"] >= 1.0), name
    for key in _ARRAYS:
      np.testing.assert_allclose(np.asarray(got[key]), np.asarray(want[key]), rtol=1e-6,
                                 atol=1e-9, err_msg=f"{name}: {key}")
