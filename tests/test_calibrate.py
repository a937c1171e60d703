"""Calibration: fitting efficiency parameters to measurements, logs and microbenchmarks."""

import dataclasses
import importlib.resources
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.fit import calibrate as cm_calibrate
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
  fit, held = cm.validation.split_cases(cases, holdout_fraction=0.3, seed=0)
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
  a = cm.validation.split_cases(cases, 0.3, seed=1)
  b = cm.validation.split_cases(cases, 0.3, seed=1)
  assert [c.label for c in a[0]] == [c.label for c in b[0]]
  assert {c.group for c in a[1]} == {"training", "kernel"}
  assert len(a[0]) + len(a[1]) == len(cases)


def test_summary_table_and_str():
  cases = cm.validation.cases(["kernel"])
  fit, held = cm.validation.split_cases(cases, 0.3, seed=0)
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
    cm.validation.split_cases(cm.validation.cases(["kernel"]), 1.5)


def test_verl_log_cases_from_the_packaged_example_and_fit():
  job, plan, cluster = _default_plan()
  path = importlib.resources.files("costmodel") / "data" / "example_verl_log.jsonl"
  cases = cm.validation.verl_log_cases(str(path), job, plan, cluster)
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
    cm.validation.verl_log_cases(str(log), job, plan, cluster)


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


# A hand-checkable problem: two parameters, each case a known linear mix of them.
_TRUE_X, _TRUE_Y = 0.2, 0.03  # train_overhead_s, sync_overhead_s


def _linear_cases(noise=None, groups=("a", "b")):
  out = []
  for g in groups:
    for i, (a, b) in enumerate(((1.0, 0.0), (1.0, 10.0), (0.5, 40.0), (2.0, 5.0), (0.0, 30.0))):
      value = a * _TRUE_X + b * _TRUE_Y
      if noise is not None:
        value *= float(np.exp(noise[len(out)]))
      out.append(cm.validation.Case(
          f"syn:{g}{i}", g, f"{a} x + {b} y", value, "s",
          lambda eff, a=a, b=b: a * eff.train_overhead_s + b * eff.sync_overhead_s))
  return out


_TWO = ("train_overhead_s", "sync_overhead_s")


@pytest.mark.parametrize("loss, weighting", [("squared", "case"), ("huber", "group"),
                                             ("huber", "row")])
def test_two_parameters_are_recovered_from_cases_they_generated(loss, weighting):
  # Defaults 0.05 and 0.05: the fit must move x up fourfold and y down by 40%.
  result = cm.calibrate(_linear_cases(), fields=_TWO, steps=600, learning_rate=0.1, prior=0.0,
                        loss=loss, weighting=weighting)
  assert float(result.efficiency.train_overhead_s) == pytest.approx(_TRUE_X, rel=0.02)
  assert float(result.efficiency.sync_overhead_s) == pytest.approx(_TRUE_Y, rel=0.02)
  assert max(abs(r.error_after) for r in result.rows) < 0.02
  assert result.cv_scores == {} and result.prior == 0.0


def test_huber_loss_resists_an_outlier_that_drags_squared_error():
  cases = _linear_cases()
  cases[0] = cases[0]._replace(published=cases[0].published * 5.0)  # a row the model cannot express
  errs = {}
  for loss in ("squared", "huber"):
    r = cm.calibrate(cases, fields=_TWO, steps=400, prior=0.0, loss=loss, huber_delta=0.1)
    errs[loss] = abs(float(r.efficiency.train_overhead_s) / _TRUE_X - 1.0)
  assert errs["huber"] < 0.5 * errs["squared"]


def test_robust_loss_is_squared_inside_delta_and_linear_outside():
  from costmodel._src.fit import objective
  err = np.array([-0.05, 0.1, 0.5, -2.0])
  got = np.asarray(objective.robust_loss(err, 0.2))
  want = np.where(np.abs(err) <= 0.2, err**2, 2 * 0.2 * np.abs(err) - 0.04)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(objective.robust_loss(err, 1e6)), err**2, rtol=1e-6)


def test_case_weights_per_group_and_per_row():
  from costmodel._src.fit import objective
  cases = _linear_cases(groups=("a",)) + _linear_cases(groups=("b",))[:2]
  w = objective.case_weights(cases, "group")
  assert w.sum() == pytest.approx(1.0)
  assert w[:5].sum() == pytest.approx(0.5) and w[5:].sum() == pytest.approx(0.5)
  shared = [c._replace(row_id="syn:one") for c in cases[:4]] + cases[4:]
  w = objective.case_weights(shared, "row")
  assert w[:4].sum() == pytest.approx(w[4])
  np.testing.assert_allclose(objective.case_weights(cases, "case"), 1 / 7)


def test_cross_validated_prior_uses_only_the_fit_cases():
  noise = np.random.default_rng(3).normal(0.0, 0.3, 10)
  fit = _linear_cases(noise)
  held_a = _linear_cases(groups=("c",))
  held_b = [c._replace(published=c.published * 3.0) for c in held_a[:2]]
  kw = dict(fields=_TWO, steps=150, prior=(0.0, 0.03, 1.0, 30.0), folds=3, loss="huber")
  ra = cm.calibrate(fit, held_a, **kw)
  rb = cm.calibrate(fit, held_b, **kw)
  rc = cm.calibrate(fit, (), **kw)
  assert set(ra.cv_scores) == {0.0, 0.03, 1.0, 30.0}
  assert all(np.isfinite(v) for v in ra.cv_scores.values())
  assert ra.cv_scores == rb.cv_scores == rc.cv_scores
  assert ra.prior == rb.prior == rc.prior == min(ra.cv_scores, key=ra.cv_scores.get)
  for f in _TWO:
    assert float(getattr(ra.efficiency, f)) == float(getattr(rb.efficiency, f))
  # The fit cases do decide: the same fit cases moved far off change the scores.
  rd = cm.calibrate([c._replace(published=c.published * (1 + 2 * (i % 2)))
                     for i, c in enumerate(fit)], held_a, **kw)
  assert rd.cv_scores != ra.cv_scores


def test_folds_are_seeded_and_stratified():
  from costmodel._src.fit import cross_validate
  cases = _linear_cases(groups=("a", "b", "c"))
  ids = cross_validate.fold_ids(cases, 3, seed=1)
  np.testing.assert_array_equal(ids, cross_validate.fold_ids(cases, 3, seed=1))
  for g in "abc":
    assert sorted(np.bincount(ids[[c.group == g for c in cases]], minlength=3)) == [1, 2, 2]
  assert sorted(np.bincount(ids)) == [5, 5, 5]


@pytest.mark.parametrize("kwargs, match", [
    (dict(loss="l1"), "loss='l1' must be one of"),
    (dict(weighting="run"), "weighting='run' must be one of"),
    (dict(loss="huber", huber_delta=0.0), "huber_delta=0.0 must be > 0"),
    (dict(prior=(-1.0, 0.1)), r"prior=\(-1.0, 0.1\) must be one or more weights >= 0"),
    (dict(prior=(0.1, 1.0), folds=1), r"folds=1 must lie in \[2, 10\]"),
])
def test_calibrate_bad_options(kwargs, match):
  with pytest.raises(ValueError, match=match):
    cm.calibrate(_linear_cases(), fields=_TWO, steps=2, **kwargs)


def test_objectives_sharing_a_row_share_its_compiled_program():
  from costmodel._src.fit import objective
  cases = _linear_cases()
  eff = cm.Efficiency()
  whole = objective.Objective(cases, eff, _TWO)
  one = objective.Objective(cases[3:4], eff, _TWO)
  assert one.fns[0] is whole.fns[3]
  # Another starting point or field list is another program.
  assert objective.Objective(cases[3:4], eff, _TWO[:1]).fns[0] is not one.fns[0]
  moved = dataclasses.replace(eff, sync_overhead_s=2 * eff.sync_overhead_s)
  assert objective.Objective(cases[3:4], moved, _TWO).fns[0] is not one.fns[0]
  # The shared program gives the row's own loss: (a x + b y) with a=2, b=5 at
  # the defaults against its published value.
  z = {f: jnp.atleast_1d(objective._to_z(f, getattr(eff, f))) for f in _TWO}
  loss, _, err = one(z, np.ones((1, 1)), np.array([1e6]), with_errors=True)
  c = cases[3]
  expected = np.log(2.0 * eff.train_overhead_s + 5.0 * eff.sync_overhead_s) - np.log(c.published)
  assert float(err[0, 0]) == pytest.approx(float(expected), rel=1e-5, abs=1e-6)
  assert float(loss[0]) == pytest.approx(float(expected) ** 2, rel=1e-4, abs=1e-9)


# It loads the RL cases, which infer their missing mean lengths once per
# process: on the worker of the other tests that load them.
@pytest.mark.xdist_group("validation")
def test_calibration_with_moe_fp8_and_deepseek_rows_stays_finite():
  # The DeepSeek-V3 run on 96 H20 (rl:18) has a jitted float32 gradient with
  # NaN and inf in most default fields; the fit runs in float64, where it is
  # finite, so these rows join the fit without poisoning it.
  moe = cm.validation.cases(["moe"])
  fp8 = cm.validation.cases(["fp8"])
  deepseek = [c for c in cm.validation.cases(["rl_step"]) if c.row_id == "rl:18"]
  cases = [moe[0], moe[-1], moe[-3], fp8[0], fp8[-1]] + deepseek
  assert len(deepseek) == 1
  from costmodel._src.fit import objective
  with jax.enable_x64(True):
    obj = objective.Objective(deepseek, cm.Efficiency(), cm_calibrate.DEFAULT_FIT)
    z0 = {f: jnp.atleast_1d(objective._to_z(f, getattr(cm.Efficiency(), f)))
          for f in cm_calibrate.DEFAULT_FIT}
    loss, grad, _ = obj(z0, np.ones((1, 1)), np.array([1e6]))
  assert np.isfinite(float(loss[0]))
  g = np.array([float(v[0]) for v in grad.values()])
  assert np.isfinite(g).all()
  assert (g != 0.0).sum() >= 10  # the fields that were NaN or inf in float32 move it
  result = cm.calibrate(cases, steps=8, learning_rate=0.1, prior=0.01, loss="huber",
                        weighting="group")
  assert np.isfinite(result.loss_history).all()
  assert result.loss_history[-1] < result.loss_history[0]
  for f in cm_calibrate.DEFAULT_FIT:
    assert np.isfinite(float(getattr(result.efficiency, f))), f
  assert all(np.isfinite(r.after) for r in result.rows)
