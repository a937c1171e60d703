"""``rlcost-estimate`` (``python -m search.estimate_cli``) and ``rlcost-plan --from_verl``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import costmodel as cm
import export
from search import estimate_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "tests", "data", "verl_examples", "run_qwen3_8b_fsdp_1dda039.txt")


def _run(module, args, cwd):
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("JAX_PLATFORMS", None)
  return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                        env=env, cwd=cwd, timeout=900)


def _swapped_ipc(plan):
  """The plan as NeMo-RL runs it colocated: the actor's state swapped, CUDA IPC refit."""
  roles = tuple(cm.RolePlan(r.role, r.pool, train=r.train.replace(swap=1.0),
                            infer=r.infer_layout.replace(swap=1.0)) if r.role == "actor" else r
                for r in plan.roles)
  return plan.replace(roles=roles, engine=plan.engine.replace(sync_backend="ipc"))


def test_estimate_of_an_imported_run_and_of_its_plan_file(tmp_path):
  r = _run("search.estimate_cli", ["--from_verl", EXAMPLE, "--response_mean", "1000",
                                   "--out", "plan.json", "--export", "verl",
                                   "--report", "report.html"], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  assert r.stderr == ""  # no platform warnings, no logging
  job, plan, cluster = export.read_config("verl", EXAMPLE, response_mean=1000)
  step = float(cm.estimate(job, plan, cluster).step_time_s)
  assert f"step {step:.2f} s  mode sync" in r.stdout
  for stage in ("generate", "reference", "old_log_prob", "actor_update", "weight_sync"):
    assert re.search(rf"^{stage} +all ", r.stdout, re.M), stage
  assert "plan: all:8 | actor tp1 pp1 zero3 mb10 rc2 | engine tp2 mem 0.60 seqs 256" in r.stdout
  written = json.loads((tmp_path / "plan.json").read_text())
  assert abs(written["predicted"]["step_time_s"] - step) < 1e-9
  verl = (tmp_path / "plan.verl.sh").read_text()
  assert verl.startswith("# veRL export (keys checked against verl-project/verl@1dda039)")
  assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.6" in verl
  # NeMo-RL cannot run this plan: colocated, it always swaps the policy's state to the host
  # and refits by CUDA IPC, where the veRL run keeps the state resident (param_offload False).
  with pytest.raises(ValueError, match="actor.train.swap=0"):
    export.to_nemo_rl(plan, job, cluster)
  assert export.to_nemo_rl(_swapped_ipc(plan), job, cluster)["defaults"] == "grpo_math_1B.yaml"
  assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 4
  again = _run("search.estimate_cli", ["--plan", "plan.json"], tmp_path)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"step {step:.2f} s  mode sync" in again.stdout
  assert again.stdout.startswith("plan file plan.json\n")


def test_plan_from_a_verl_run_prints_the_settings_to_change(tmp_path):
  (tmp_path / "small.txt").write_text("\n".join([
      "algorithm.adv_estimator=grpo", "data.train_batch_size=64", "data.max_prompt_length=512",
      "data.max_response_length=1024", "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B",
      "actor_rollout_ref.actor.ppo_mini_batch_size=32",
      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
      "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
      "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
      "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
      "actor_rollout_ref.rollout.n=4", "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]))
  r = _run("search.plan", ["--from_verl", "small.txt", "--response_mean", "500",
                           "--families", "colocated", "--starts", "4", "--steps", "20",
                           "--top_k", "2", "--out", "plan.json", "--export", "verl"], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "job: grpo qwen2.5-1.5b, 64 prompts x 4 samples, prompt 512" in r.stdout
  m = re.search(r"^current veRL run: step ([0-9.]+) s", r.stdout, re.M)
  assert m, r.stdout[-3000:]
  better = re.findall(r"^better #\d: step ([0-9.]+) s \(([0-9.]+)x faster", r.stdout, re.M)
  assert better, r.stdout[-3000:]
  for step, speed in better:
    assert float(step) < float(m.group(1))
    assert abs(float(m.group(1)) / float(step) - float(speed)) < 0.01
  # Each change is a veRL key with its old and new value.
  changes = re.findall(r"^  (\S+): (\S+) -> (\S+)$", r.stdout, re.M)
  assert changes and all(k.split(".")[0] in ("actor_rollout_ref", "trainer", "data", "algorithm")
                         for k, _, _ in changes)
  assert (tmp_path / "plan.verl.sh").exists() and (tmp_path / "plan.json").exists()
  assert "Traceback" not in r.stderr and "No GPU/TPU" not in r.stderr


def test_estimate_of_a_slime_run_and_an_areal_run_that_lacks_its_keep_rate(
    tmp_path, monkeypatch, capsys):
  # In this process (``estimate_cli.call``): the subprocess runs are the tests above.
  import test_export_frameworks as grid  # pylint: disable=import-outside-toplevel
  monkeypatch.chdir(tmp_path)
  name, job, plan, cluster = next(g for g in grid.GRID if g[0] == "grpo/megatron/split-async1")
  plan = export.get("slime").adapt(plan)
  (tmp_path / "run.sh").write_text(export.get("slime").export(plan, job, cluster))
  code = estimate_cli.call(["--from_slime", "run.sh", "--model", "qwen2.5-7b",
                            "--response_mean", "1500"])
  out, err = capsys.readouterr()
  assert code == 0, err[-3000:]
  back = export.read_config("slime", str(tmp_path / "run.sh"), model="qwen2.5-7b",
                            response_mean=1500)
  step = float(cm.estimate(back.job, back.plan, back.cluster).step_time_s)
  assert f"step {step:.2f} s  mode async(k=1)" in out, (name, out[-2000:])
  assert out.startswith("slime run run.sh\n")
  _, dapo, plan, cluster = next(g for g in grid.GRID if g[1].algorithm == "dapo"
                                and "split-async2" in g[0])
  cfg = export.to_areal(export.get("areal").adapt(plan), dapo, cluster)
  (tmp_path / "dapo.yaml").write_text(export.to_yaml(cfg))
  code = estimate_cli.call(["--from_areal", "dapo.yaml", "--model", "qwen3-30b-a3b",
                            "--response_mean", "1500"])
  out, err = capsys.readouterr()
  # No config states DAPO's keep rate: every group is taken as kept, and the
  # output says so on its "not modelled" line.
  assert code == 0 and err == "", err
  assert re.search(r"^not modelled: .*all assumed kept \(oversample=\)", out, re.M), out[:1500]
