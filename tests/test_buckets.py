"""Step-time buckets as NeMo-RL and veRL name them, and NeMo-RL logs as calibration cases."""

import json

import numpy as np
import pytest

import costmodel as cm


@pytest.fixture(scope="module")
def run():
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=64.0,
                 samples_per_prompt=8.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)
  plans = {k: cm.Plan.split(job, cluster, 8, train=cm.Parallel(tp=2.0), engine=cm.Engine(tp=2.0),
                            mode=cm.Mode(staleness=k)) for k in (0, 1)}
  return job, cluster, plans


def _durations(est):
  return dict(zip(est.stage_names, np.asarray(est.duration_s), strict=True))


def test_nemo_rl_buckets_from_the_estimate(run):
  job, cluster, plans = run
  for staleness, plan in plans.items():
    est = cm.estimate(job, plan, cluster)
    d = _durations(est)
    b = {k: float(v) for k, v in cm.step_buckets(est, "nemo_rl").items()}
    assert b["total_step_time"] == pytest.approx(float(est.step_time_s))
    assert b["policy_training"] == pytest.approx(d["actor_update"])
    assert b["policy_and_reference_logprobs"] == pytest.approx(d["old_log_prob"] + d["reference"])
    assert b["weight_sync"] == pytest.approx(d["weight_sync"])
    timed = (b["policy_training"] + b["policy_and_reference_logprobs"] + b["weight_sync"]
             + b["reward_calculation"])
    gen_key = "exposed_generation" if staleness else "generation"
    assert b[gen_key] == pytest.approx(max(b["total_step_time"] - timed, 0.0), abs=1e-3)
    if staleness:
      # The trainer waits on the buffer only as long as the generation it does not hide.
      assert 0.0 <= b["idle/buffer_starvation"] <= b["exposed_generation"] + 1e-6
      idle = dict(zip(est.pool_names, np.asarray(est.pool_idle_s), strict=True))
      assert b["idle/refit_bubble"] == pytest.approx(idle["gen"])
    else:
      # Synchronous: the trainer waits for the whole generation stage.
      assert b["generation"] == pytest.approx(d["generate"], rel=0.02)
  sync = cm.estimate(job, plans[0], cluster)
  asyn = cm.estimate(job, plans[1], cluster)
  assert float(cm.step_buckets(asyn, "nemo_rl")["exposed_generation"]) < float(
      cm.step_buckets(sync, "nemo_rl")["generation"])


def test_verl_buckets_are_its_timing_keys(run):
  job, cluster, plans = run
  est = cm.estimate(job, plans[0], cluster)
  d = _durations(est)
  b = {k: float(v) for k, v in cm.step_buckets(est, "verl").items()}
  assert b["timing_s/gen"] == pytest.approx(d["generate"])
  assert b["timing_s/update_actor"] == pytest.approx(d["actor_update"])
  assert b["timing_s/step"] == pytest.approx(float(est.step_time_s))
  assert "timing_s/values" not in b  # GRPO has no critic
  with pytest.raises(ValueError, match=r"framework='areal' is not one of \('nemo_rl', 'verl'\)"):
    cm.step_buckets(est, "areal")


def _write_jsonl(path, rows):
  path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  return path


def test_read_nemo_rl_log_json_lines_and_csv(tmp_path):
  rows = [{"step": s, "timing/train/total_step_time": 300.0 + s,
           "timing/train/exposed_generation": 190.0 + s, "timing/train/policy_training": 70.0,
           "train/loss": 0.1} for s in (1, 2, 3)]
  rows.append({"step": 4, "data": {"timing/train/total_step_time": 310.0}})
  rows.append({"step": 5, "timing/validation/total_validation_time": 9.0})  # no train bucket
  steps = cm.read_nemo_rl_log(_write_jsonl(tmp_path / "run.jsonl", rows))
  assert sorted(steps) == [1, 2, 3, 4]
  assert steps[2] == {"total_step_time": 302.0, "exposed_generation": 192.0,
                      "policy_training": 70.0}
  csv_path = tmp_path / "wandb.csv"
  csv_path.write_text("_step,run7 - timing/train/generation,run7 - timing/train/"
                      "prepare_for_generation/total\n1,150.5,8.0\n2,149.5,\n")
  steps = cm.read_nemo_rl_log(csv_path)
  assert steps == {1: {"generation": 150.5, "weight_sync": 8.0}, 2: {"generation": 149.5}}


@pytest.mark.parametrize("text, match", [
    ("", "file is empty"),
    ('{"step": 1, "timing/train/policy_training": "abc"}\n', r"line 1: field 'timing/train/"
     r"policy_training' = 'abc' is not a number"),
    ('{"step": 1, "timing/train/policy_training": -3}\n', "must be finite and >= 0"),
    ('{"timing/train/policy_training": 3}\n', "no integer step counter"),
    ('{"step": 1, "timing/train/policy_training": 3}\n{"step": 1, "timing/train/'
     'policy_training": 4}\n', "step 1 repeats"),
    ('{"step": 1, "train/loss": 3}\n', "no step holds a bucket"),
    ('{"step": 1, "timing/train/weight_sync": 3}\n[1, 2]\n', "line 2: expected a JSON object"),
])
def test_bad_nemo_rl_logs_refused(tmp_path, text, match):
  path = tmp_path / "bad.jsonl"
  path.write_text(text)
  with pytest.raises(ValueError, match=match):
    cm.read_nemo_rl_log(path)


def test_nemo_rl_log_cases_predict_the_buckets(tmp_path, run):
  job, cluster, plans = run
  plan = plans[1]
  rows = [{"step": s, "timing/train/total_step_time": 400.0 if s == 1 else 200.0 + s,
           "timing/train/exposed_generation": 100.0 + s, "timing/train/weight_sync": 5.0}
          for s in range(1, 6)]
  cases = cm.validation.nemo_rl_log_cases(_write_jsonl(tmp_path / "run.jsonl", rows), job, plan, cluster,
                               skip=1)
  by = {c.label: c for c in cases}
  assert by["total_step_time"].published == pytest.approx(203.5)  # median of steps 2-5
  assert by["exposed_generation"].published == pytest.approx(103.5)
  est = cm.estimate(job, plan, cluster)
  expected = cm.step_buckets(est, "nemo_rl")
  for label, case in by.items():
    assert float(case.predict(cm.Efficiency())) == pytest.approx(float(expected[label]), rel=1e-5)
  assert by["total_step_time"].group == "rl_step" and by["weight_sync"].group == "rl_stage"
  with pytest.raises(ValueError, match="skip=9 leaves none of the log's 5 steps"):
    cm.validation.nemo_rl_log_cases(_write_jsonl(tmp_path / "r.jsonl", rows), job, plan, cluster, skip=9)
