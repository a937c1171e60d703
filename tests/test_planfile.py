"""Plan files: what write_plan writes, read_plan reads back as the same plan."""

import dataclasses
import json

import numpy as np
import pytest

import costmodel as cm
import export

QWEN7B = cm.models.get("qwen2.5-7b")
MOE = cm.models.get("qwen3-30b-a3b")
RM = cm.models.get("qwen2.5-1.5b")
TWO_NODES = cm.Cluster("H100", 8, 2)


def _jobs():
  resp = cm.ResponseLength.from_mean_max(1500.0, 4096.0)
  return {
      "grpo": cm.RLJob("grpo", QWEN7B, prompts_per_step=128, response=resp, mini_batches=4),
      "ppo_rm": cm.RLJob("ppo", QWEN7B, prompts_per_step=256, samples_per_prompt=1,
                         response=resp, reward_model=RM, ppo_epochs=2, mini_batches=4),
      "dapo_moe": cm.RLJob("dapo", MOE, prompts_per_step=64, response=resp, oversample=1.5),
  }


def _plans():
  jobs = _jobs()
  engine = cm.Engine(tp=2, memory_fraction=0.55, max_seqs=384, prefix_caching=False)
  grid = []
  for name, job in jobs.items():
    train = cm.Parallel(tp=2, pp=2, micro_batch=2, zero_stage=1, recompute="selective",
                        sequence_parallel=False)
    if name == "dapo_moe":
      train = cm.Parallel(tp=2, ep=4, vpp=2, pp=2, micro_batch=1, zero_stage=0, offload=1)
    critic = cm.Parallel(tp=4, micro_batch=4) if job.has_critic else None
    infer = cm.Parallel(tp=2, micro_batch=8, recompute="none")
    grid.append((f"{name}-colocated", job, cm.Plan.colocated(
        job, TWO_NODES, train=train, engine=engine, critic=critic, infer=infer)))
    for mode in (cm.Mode(), cm.Mode(staleness=1), cm.Mode(staleness=3, partial_rollout=True),
                 cm.Mode(fuse_inference=True, fuse_training=job.has_critic)):
      grid.append((f"{name}-split-{mode.name}", job, cm.Plan.split(
          job, TWO_NODES, gen_gpus=4, train=train, critic=critic, mode=mode,
          engine=cm.Engine(tp=4, ep=4 if job.actor.n_experts else 1))))
  # Three pools: the reward model on its own pool.
  job = jobs["ppo_rm"]
  p = cm.Parallel(micro_batch=2)
  roles = (cm.RolePlan("actor", "train", train=p), cm.RolePlan("reference", "train", infer=p),
           cm.RolePlan("critic", "train", train=p, infer=cm.Parallel(micro_batch=4)),
           cm.RolePlan("reward", "rm", infer=cm.Parallel(micro_batch=8, offload=1)))
  pools = (cm.Pool("gen", 8.0), cm.Pool("train", 6.0), cm.Pool("rm", 2.0))
  grid.append(("ppo_rm-split3", job, cm.Plan(pools=pools, roles=roles, engine=engine,
                                              rollout_pool="gen", mode=cm.Mode(staleness=2))))
  return grid


GRID = _plans()


@pytest.mark.parametrize("name,job,plan", GRID, ids=[g[0] for g in GRID])
def test_read_plan_gives_the_plan_written(tmp_path, name, job, plan):
  del name
  path = tmp_path / "plan.json"
  export.write_plan(str(path), plan)
  back = export.read_plan(str(path))
  assert back.plan == plan
  assert back.job is None and back.cluster is None and back.predicted is None
  # Layout fields the old format dropped survive: inference layouts, SP, prefix caching.
  assert [r.infer for r in back.plan.roles] == [r.infer for r in plan.roles]
  assert back.plan.engine.prefix_caching == plan.engine.prefix_caching


@pytest.mark.parametrize("name,job,plan", GRID[:6] + GRID[-1:], ids=[g[0] for g in
                                                                    GRID[:6] + GRID[-1:]])
def test_read_plan_gives_job_cluster_and_the_same_estimate(tmp_path, name, job, plan):
  path = tmp_path / "plan.json"
  est = cm.estimate(job, plan, TWO_NODES)
  export.write_plan(str(path), plan, est, family=name, job=job, cluster=TWO_NODES)
  back = export.read_plan(str(path))
  assert back.plan == plan and back.family == name
  assert back.cluster == TWO_NODES
  assert back.job.actor == job.actor and back.job.critic == job.critic
  assert back.job.reward_model == job.reward_model
  np.testing.assert_array_equal(back.job.response.knots, np.asarray(job.response.knots))
  assert export.plan_to_dict(back.plan, job=back.job) == export.plan_to_dict(plan, job=job)
  again = cm.estimate(back.job, back.plan, back.cluster)
  assert float(again.step_time_s) == pytest.approx(float(est.step_time_s), rel=1e-9)
  assert back.predicted["step_time_s"] == pytest.approx(float(est.step_time_s), rel=1e-12)


def test_custom_model_and_hardware_are_written_in_full(tmp_path):
  custom = cm.ModelSpec("tiny", n_layers=4, hidden=512, n_heads=8, n_kv_heads=8, head_dim=64,
                        ffn_hidden=1024, vocab=1000)
  hw = dataclasses.replace(cm.hardware.get("H100"), name="H100-slow",
                           hbm_bandwidth_bytes_per_s=2e12)
  job = cm.RLJob("grpo", custom, prompts_per_step=16)
  cluster = cm.Cluster(hw, 8, 1)
  plan = cm.Plan.colocated(job, cluster)
  d = export.plan_to_dict(plan, job=job, cluster=cluster)
  assert d["job"]["actor"]["n_layers"] == 4  # not a preset: every field
  assert d["cluster"]["accelerator"]["hbm_bandwidth_bytes_per_s"] == 2e12
  path = tmp_path / "p.json"
  export.write_plan(str(path), plan, job=job, cluster=cluster)
  back = export.read_plan(str(path))
  assert back.job.actor == custom and back.cluster == cluster


def test_bad_plan_files_name_the_field(tmp_path):
  plan = GRID[0][2]
  d = export.plan_to_dict(plan)
  with pytest.raises(ValueError, match="format=None must be 2"):
    export.plan_from_dict({k: v for k, v in d.items() if k != "format"})
  bad = json.loads(json.dumps(d))
  bad["roles"]["actor"]["train"]["tq"] = 2
  with pytest.raises(ValueError, match=r"roles.actor.train has unknown field\(s\) \['tq'\]"):
    export.plan_from_dict(bad)
  bad = json.loads(json.dumps(d))
  bad["engine"]["memory_fraction"] = 1.5
  with pytest.raises(ValueError, match="memory_fraction=1.5"):
    export.plan_from_dict(bad)
  path = tmp_path / "x.json"
  path.write_text("{not json")
  with pytest.raises(ValueError, match="is not JSON"):
    export.read_plan(str(path))


def test_nested_specs_read_back(tmp_path):
  """LoRA, multi-turn episodes and per-layout precision survive a plan file."""
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=32.0,
                 samples_per_prompt=4.0, lora=cm.LoRA(rank=16, targets=("q", "v")),
                 multi_turn=cm.MultiTurn(turns=2, tool_latency_s_mean=1.0,
                                         tool_latency_s_max=4.0))
  plan = cm.Plan.colocated(job, TWO_NODES, train=cm.Parallel(precision=cm.Precision(
      compute="fp8")), engine=cm.Engine(precision=cm.Precision(weights="fp8", compute="fp8")))
  path = tmp_path / "plan.json"
  export.write_plan(str(path), plan, job=job, cluster=TWO_NODES)
  back = export.read_plan(str(path))
  assert back.plan == plan
  assert back.job.lora == job.lora and back.job.multi_turn == job.multi_turn
  assert float(cm.estimate(back.job, back.plan, TWO_NODES).step_time_s) == pytest.approx(
      float(cm.estimate(job, plan, TWO_NODES).step_time_s), rel=1e-9)
