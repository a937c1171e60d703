"""Calibration: fitting efficiency parameters to measurements, logs and microbenchmarks."""

import dataclasses
import importlib.resources
import json

import numpy as np
import pytest

import costmodel as cm
from costmodel._src.fit import microbench


def _default_plan():
  model = cm.models.get("qwen2.5-7b")
  cluster = cm.Cluster(cm.hardware.get("H100"), 8, 8)
  job = cm.RLJob("grpo", model, prompts_per_step=512.0, samples_per_prompt=8.0,
                 prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(2000.0, 8192.0))
  plan = cm.Plan.colocated(job, cluster, train=cm.Parallel(zero_stage=3, recompute=2,
                                                           micro_batch=4),
                           engine=cm.Engine(tp=2))
  return job, plan, cluster


def _synthetic_cases(true_eff):
  """Cases whose 'published' values come from the model with known parameters."""
  base = cm.validation.cases(["training", "kernel", "decode"])
  return [c._replace(published=float(c.predict(true_eff))) for c in base]


def test_calibration_recovers_known_parameters_and_reduces_error():
  truth = cm.Efficiency(attention_efficiency=0.5, matmul_half_rows=96.0,
                        memory_half_time_s=1.0e-6, link_efficiency=0.8)
  cases = _synthetic_cases(truth)
  fit, held = cm.split_cases(cases, holdout_fraction=0.3, seed=0)
  result = cm.calibrate(fit, held, fields=("attention_efficiency", "matmul_half_rows",
                                           "memory_half_time_s", "link_efficiency"),
                        steps=150, learning_rate=0.08, prior=0.0)
  before = np.median([abs(r.error_before) for r in result.rows if not r.fitted])
  after = np.median([abs(r.error_after) for r in result.rows if not r.fitted])
  assert after < 0.25 * before
  assert result.loss_history[-1] < 0.1 * result.loss_history[0]
  assert result.efficiency.matmul_half_rows == pytest.approx(96.0, rel=0.15)
  assert result.efficiency.attention_efficiency == pytest.approx(0.5, rel=0.15)


def test_calibrated_parameters_stay_physical():
  # Published values far off push the parameters hard; the transforms keep
  # every efficiency in (0, 1) and every overhead positive.
  cases = [c._replace(published=c.published * 0.05)
           for c in cm.validation.cases(["kernel"])]
  result = cm.calibrate(cases, steps=60, learning_rate=0.3, prior=0.0)
  eff = result.efficiency
  for f in ("attention_efficiency", "link_efficiency", "dp_overlap", "train_efficiency"):
    assert 0.0 < float(getattr(eff, f)) < 1.0
  for f in ("matmul_half_rows", "memory_half_time_s", "train_overhead_s", "sync_per_tensor_s"):
    assert float(getattr(eff, f)) > 0.0


def test_split_is_seeded_and_stratified():
  cases = cm.validation.cases(["training", "kernel"])
  a = cm.split_cases(cases, 0.3, seed=1)
  b = cm.split_cases(cases, 0.3, seed=1)
  assert [c.label for c in a[0]] == [c.label for c in b[0]]
  assert {c.group for c in a[1]} == {"training", "kernel"}
  assert len(a[0]) + len(a[1]) == len(cases)


def test_summary_table_and_str():
  cases = cm.validation.cases(["kernel"])
  fit, held = cm.split_cases(cases, 0.3, seed=0)
  result = cm.calibrate(fit, held, steps=5)
  table = result.summary_table()
  assert {row["part"] for row in table} == {"fit", "held-out"}
  assert "median before" in str(result)


@pytest.mark.parametrize("kwargs, match", [
    (dict(fit=[]), "fit must hold at least one case"),
    (dict(fields=("no_such_field",)), "field='no_such_field'"),
])
def test_calibrate_bad_input(kwargs, match):
  cases = cm.validation.cases(["kernel"])
  args = dict(fit=cases)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    cm.calibrate(**args)


def test_calibrate_rejects_non_positive_measurement():
  case = cm.validation.cases(["kernel"])[0]._replace(published=0.0)
  with pytest.raises(ValueError, match="published=0.0 must be > 0"):
    cm.calibrate([case])


def test_split_rejects_bad_fraction():
  with pytest.raises(ValueError, match="holdout_fraction=1.5"):
    cm.split_cases(cm.validation.cases(["kernel"]), 1.5)


def test_verl_log_cases_from_the_packaged_example_and_fit():
  job, plan, cluster = _default_plan()
  path = importlib.resources.files("costmodel") / "data" / "example_verl_log.jsonl"
  cases = cm.verl_log_cases(str(path), job, plan, cluster)
  stages = {c.label for c in cases}
  assert {"gen", "old_log_prob", "ref", "update_actor", "step"} <= stages
  medians = cm.steady_state(cm.read_verl_log(str(path)))
  for c in cases:
    assert c.published == pytest.approx(medians[c.label])
  result = cm.calibrate(cases, steps=150, learning_rate=0.05)
  before = np.mean([abs(r.error_before) for r in result.rows])
  after = np.mean([abs(r.error_after) for r in result.rows])
  assert after < before


def test_verl_log_cases_without_known_stages(tmp_path):
  job, plan, cluster = _default_plan()
  log = tmp_path / "run.jsonl"
  log.write_text('{"step": 1, "timing_s/testing": 3.0}\n{"step": 2, "timing_s/testing": 3.0}\n'
                 '{"step": 3, "timing_s/adv": 1.0}\n{"step": 4, "timing_s/adv": 1.0}\n')
  with pytest.raises(ValueError, match="none of the stages"):
    cm.verl_log_cases(str(log), job, plan, cluster)


def _synthetic_microbench(hw, eff):
  mm = [dict(m=m, n=n, k=k) for m in (1, 8, 64, 256, 1024, 4096) for n, k in
        ((4096, 4096), (14336, 4096))]
  hb = [dict(bytes_moved=float(b)) for b in (2**20, 2**23, 2**26, 2**29, 2**31)]
  mm_a = np.array([[r["m"], r["n"], r["k"], 1.0] for r in mm])
  hb_a = np.array([[r["bytes_moved"], 1.0] for r in hb])
  t_mm, t_hb = microbench._predict(hw, eff, mm_a, hb_a)
  for r, t in zip(mm, np.asarray(t_mm), strict=True):
    r["seconds"] = float(t)
  for r, t in zip(hb, np.asarray(t_hb), strict=True):
    r["seconds"] = float(t)
  return {"device": {"device_kind": "synthetic"}, "date": "2026-11-30", "matmul": mm,
          "hbm": hb}


def test_microbenchmark_fit_recovers_the_generating_preset(tmp_path):
  truth_hw = cm.hardware.get("H200").replace(matmul_efficiency_max=0.70,
                                             hbm_efficiency_max=0.91)
  truth_eff = cm.Efficiency(matmul_half_rows=80.0, memory_half_time_s=1.5e-6)
  path = tmp_path / "bench.json"
  path.write_text(json.dumps(_synthetic_microbench(truth_hw, truth_eff)))
  fit = cm.fit_microbenchmarks(str(path), cm.hardware.get("H200"))
  assert fit.hardware.matmul_efficiency_max == pytest.approx(0.70, rel=1e-3)
  assert fit.hardware.hbm_efficiency_max == pytest.approx(0.91, rel=1e-3)
  assert fit.efficiency.matmul_half_rows == pytest.approx(80.0, rel=1e-2)
  assert fit.error_after["matmul"] < 1e-3 < fit.error_before["matmul"]
  assert fit.device == "synthetic" and fit.n_points == {"matmul": 12, "hbm": 5}
  # peaks are kept
  assert fit.hardware.peak_flops_per_s == truth_hw.peak_flops_per_s


def test_microbenchmark_fit_runs_on_the_cpu_quick_output(tmp_path):
  from benchmarks import gpu_calibration
  data = gpu_calibration.run_all(quick=True)
  fit = cm.fit_microbenchmarks(data, cm.hardware.get("H200"), steps=50)
  assert 0 < fit.hardware.matmul_efficiency_max < 1
  assert np.isfinite(fit.error_after["hbm"])


@pytest.mark.parametrize("payload, match", [
    ({"hbm": [{"bytes_moved": 1.0, "seconds": 1.0}]}, "field 'matmul'"),
    ({"matmul": [{"m": 1, "n": 1, "seconds": 1.0}], "hbm": [{"bytes_moved": 1, "seconds": 1}]},
     "lacks field 'k'"),
    ({"matmul": [{"m": 1, "n": 1, "k": 1, "seconds": -1.0}],
      "hbm": [{"bytes_moved": 1, "seconds": 1}]}, "must be > 0"),
])
def test_microbenchmark_bad_input(payload, match):
  with pytest.raises(ValueError, match=match):
    cm.fit_microbenchmarks(payload, cm.hardware.get("H200"))


def test_microbenchmark_unreadable_file(tmp_path):
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(ValueError, match="not valid JSON"):
    cm.fit_microbenchmarks(str(bad), cm.hardware.get("H200"))
  with pytest.raises(ValueError, match="cannot be read"):
    cm.fit_microbenchmarks(str(tmp_path / "missing.json"), cm.hardware.get("H200"))


def test_efficiency_replace_keeps_pytree():
  eff = dataclasses.replace(cm.Efficiency(), link_efficiency=0.5)
  assert float(eff.link_efficiency) == 0.5
