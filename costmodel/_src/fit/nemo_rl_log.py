"""A NeMo-RL run's step-time buckets as calibration cases (``nemo_rl_log_cases``).

NeMo-RL logs ``timing/train/<name>`` once per step to its loggers (wandb,
TensorBoard, MLflow; NVIDIA-NeMo/RL@7ea279ab ``nemo_rl/algorithms/grpo.py``);
:func:`read_nemo_rl_log` reads them from a wandb CSV export or from JSON lines
(one flat metrics dict per line with a ``step``, or ``{"step": N, "data":
{...}}``). The names read are :data:`BUCKETS` (see
:mod:`costmodel._src.step.buckets` for what each one times); the synchronous
loop's refit, ``prepare_for_generation/total``, is read as ``weight_sync``.
Other keys are ignored. The steady state is the median of each bucket after
``skip`` warm-up steps; :func:`nemo_rl_log_cases` turns every bucket the log
holds into a :class:`Case` that the estimate predicts for the (job, plan,
cluster) of the run, ready for :func:`costmodel.calibrate`.

Malformed input raises ValueError naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os

import numpy as np

from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.validation.rl_cases import shared_estimate
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.plan import Plan
from costmodel._src.step import buckets as buckets_lib

BUCKETS = ("total_step_time", "exposed_generation", "generation", "policy_training",
           "policy_and_reference_logprobs", "weight_sync", "reward_calculation",
           "idle/buffer_starvation", "idle/refit_bubble")
_ALIASES = {"prepare_for_generation/total": "weight_sync"}
_PREFIX = "timing/train/"
_STEP_KEYS = ("step", "_step", "Step")
_KEYS = {_PREFIX + b: b for b in BUCKETS} | {_PREFIX + a: b for a, b in _ALIASES.items()}


def _number(where: str, key: str, raw) -> float | None:
  if raw is None or (isinstance(raw, str) and not raw.strip()):
    return None
  if isinstance(raw, bool):
    raise ValueError(f"{where}: field {key!r} = {raw!r} is not a number")
  try:
    value = float(raw.strip() if isinstance(raw, str) else raw)
  except (TypeError, ValueError):
    raise ValueError(f"{where}: field {key!r} = {raw!r} is not a number") from None
  if not math.isfinite(value) or value < 0:
    raise ValueError(f"{where}: field {key!r} = {raw!r} must be finite and >= 0")
  return value


def _record(where: str, metrics: dict, step_raw) -> tuple[int, dict[str, float]] | None:
  times = {}
  for key, bucket in _KEYS.items():
    value = _number(where, key, metrics.get(key))
    if value is not None:
      if bucket in times:
        raise ValueError(f"{where}: two fields give bucket {bucket!r}; keep one")
      times[bucket] = value
  if not times:
    return None
  step = _number(where, "step", step_raw)
  if step is None or not step.is_integer():
    raise ValueError(f"{where}: no integer step counter; expected one of {list(_STEP_KEYS)}")
  return int(step), times


def read_nemo_rl_log(path: str | os.PathLike) -> dict[int, dict[str, float]]:
  """Step -> {bucket: seconds} of a NeMo-RL metrics export (CSV or JSON lines).

  Raises:
    ValueError: for an unreadable, empty or malformed file, a repeated step,
      or a file with none of the ``timing/train/`` buckets.
  """
  name = os.fspath(path)
  try:
    with open(path, encoding="utf-8-sig", newline="") as f:
      text = f.read()
  except OSError as e:
    raise ValueError(f"{name}: cannot be read ({e.strerror})") from None
  lines = [ln for ln in text.splitlines() if ln.strip()]
  if not lines:
    raise ValueError(f"{name}: file is empty; expected CSV or JSON lines with keys "
                     f"{sorted(_KEYS)}")
  out: dict[int, dict[str, float]] = {}
  if lines[0].lstrip().startswith("{"):
    rows = []
    for i, raw in enumerate(text.splitlines(), start=1):
      if not raw.strip():
        continue
      try:
        obj = json.loads(raw)
      except json.JSONDecodeError as e:
        raise ValueError(f"{name} line {i}: not valid JSON ({e.msg})") from None
      if not isinstance(obj, dict):
        raise ValueError(f"{name} line {i}: expected a JSON object")
      metrics = obj["data"] if isinstance(obj.get("data"), dict) else obj
      step = obj.get("step", next((metrics.get(k) for k in _STEP_KEYS if k in metrics), None))
      rows.append((f"{name} line {i}", metrics, step))
  else:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [c.strip().rpartition(" - ")[2] for c in next(reader)]
    rows = []
    for row in reader:
      if any(c.strip() for c in row):
        cells = dict(zip(header, row, strict=False))
        step = next((cells[k] for k in _STEP_KEYS if k in cells), None)
        rows.append((f"{name} line {reader.line_num}", cells, step))
  for where, metrics, step in rows:
    rec = _record(where, metrics, step)
    if rec is not None:
      if rec[0] in out:
        raise ValueError(f"{where}: step {rec[0]} repeats; steps must be unique")
      out[rec[0]] = rec[1]
  if not out:
    raise ValueError(f"{name}: no step holds a bucket; expected one of {sorted(_KEYS)}")
  return dict(sorted(out.items()))


def steady_buckets(steps: dict[int, dict[str, float]], skip: int = 1) -> dict[str, float]:
  """Median of each bucket over the steps after the first ``skip``."""
  if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
    raise ValueError(f"skip={skip!r} must be an integer >= 0")
  kept = list(steps.values())[skip:]
  if not kept:
    raise ValueError(f"skip={skip} leaves none of the log's {len(steps)} steps")
  names = {b for times in kept for b in times}
  return {b: float(np.median([t[b] for t in kept if b in t])) for b in BUCKETS if b in names}


def nemo_rl_log_cases(log: str | os.PathLike | dict, job: RLJob, plan: Plan, cluster: Cluster,
                      skip: int = 1) -> list[Case]:
  """Cases for every bucket of a NeMo-RL log, predicted by the estimate's buckets.

  Args:
    log: A metrics export path, or what :func:`read_nemo_rl_log` returned.
    job: The run's job.
    plan: The run's plan.
    cluster: The run's cluster.
    skip: Warm-up steps left out of the medians.
  """
  steps = read_nemo_rl_log(log) if isinstance(log, (str, os.PathLike)) else log
  medians = steady_buckets(steps, skip)
  asynchronous = "generation" not in medians
  predicted = buckets_lib.nemo_rl_buckets(shared_estimate(job, plan, cluster, None),
                                          plan.rollout_pool, asynchronous=asynchronous)
  unknown = sorted(set(medians) - set(predicted))
  if unknown:
    raise ValueError(f"nemo_rl_log_cases: buckets {unknown} are not timed by NeMo-RL's "
                     f"{'asynchronous' if asynchronous else 'synchronous'} loop; the log "
                     "mixes both")
  cases = []
  for bucket, value in medians.items():

    def fn(eff, bucket=bucket):
      est = shared_estimate(job, plan, cluster, eff)
      return buckets_lib.nemo_rl_buckets(est, plan.rollout_pool, asynchronous=asynchronous)[
          bucket]

    kind = "rl_step" if bucket == "total_step_time" else "rl_stage"
    cases.append(Case("log", kind, bucket, value, "s", fn))
  return cases
