"""The step model: schedule, execution modes, fusion, feasibility, throughput.

Stages on one pool serialise and the colocated synchronous step is their sum;
staleness k >= 1 overlaps generation with training, so the steady-state step
is the busier pool's time; partial rollouts and fusion only ever shorten the
step; infeasible plans are reported with reasons; the throughput fields agree
with the job's token count.
"""

import itertools

import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
from costmodel._src.step import algorithms

GIB = 2.0**30


def _parts(est):
  """Stage name -> duration (the rows of ``time_parts_s`` summed)."""
  t = np.asarray(est.time_parts_s).sum(-1)
  return dict(zip(est.stage_names, t.tolist(), strict=True))


def _deps(job, est):
  """Stage name -> stages it waits for in a synchronous step."""
  deps = {st.name: st.deps for st in algorithms.stage_graph(job)}
  if "switch" in est.stage_names:
    deps["switch"] = ("generate",)
  return deps


def _assert_consistent_timeline(job, est, synchronous):
  start, end = np.asarray(est.start_s), np.asarray(est.end_s)
  dur = np.asarray(est.time_parts_s).sum(-1)
  np.testing.assert_allclose(end, start + dur, rtol=1e-6, atol=1e-6)
  assert np.all(start >= 0.0)
  idx = {n: i for i, n in enumerate(est.stage_names)}
  for name, deps in _deps(job, est).items():
    for d in deps:
      if not synchronous and d == "generate":
        continue  # the data comes from an earlier step's rollouts
      assert start[idx[name]] >= end[idx[d]] * (1 - 1e-6), (name, d)
  # Stages on one GPU pool never overlap.
  for pool in est.pool_names:
    rows = sorted((start[i], end[i]) for i, p in enumerate(est.stage_pools) if p == pool)
    for (_, e0), (s1, _) in itertools.pairwise(rows):
      assert s1 >= e0 * (1 - 1e-6) - 1e-6, pool


@pytest.fixture(scope="module")
def grpo_7b():
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=128.0,
                  samples_per_prompt=8.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


@pytest.fixture(scope="module")
def ppo_7b():
  return cm.RLJob("ppo", cm.models.get("qwen2.5-7b"), prompts_per_step=128.0,
                  samples_per_prompt=4.0, prompt_len=1024.0,
                  response=cm.ResponseLength.from_mean_max(1500.0, 4096.0))


# ----- synchronous colocated -------------------------------------------------


def test_colocated_step_is_the_sum_of_its_gpu_stages(grpo_job, cluster_2x8):
  plan = cm.Plan.colocated(grpo_job, cluster_2x8, train=cm.Parallel(tp=1.0),
                           engine=cm.Engine(tp=1.0))
  est = cm.estimate(grpo_job, plan, cluster_2x8)
  assert est.stage_names == ("generate", "switch", "reward", "reference", "old_log_prob",
                             "actor_update", "weight_sync")
  assert est.stage_pools[est.stage_names.index("reward")] == "cpu"
  t = _parts(est)
  # A single controller (veRL's driver) scores the rule-based reward itself,
  # sample by sample, before it dispatches the log-prob passes: one process,
  # and the GPUs wait for it.
  samples = float(grpo_job.samples_per_step)
  assert t["reward"] == pytest.approx(samples * float(grpo_job.reward_cpu_s_per_sample), rel=1e-5)
  gpu = sum(v for n, v in t.items() if n != "reward")
  assert float(est.step_time_s) == pytest.approx(gpu + t["reward"], rel=1e-5)
  assert float(est.pool_busy_s[0]) == pytest.approx(gpu, rel=1e-5)
  assert float(est.pool_idle_s[0]) == pytest.approx(t["reward"], rel=1e-4)
  _assert_consistent_timeline(grpo_job, est, synchronous=True)
  # Without one, the reward is spread over the cluster's cores beside the GPU stages.
  spread = cm.estimate(grpo_job, plan.replace(mode=cm.Mode(single_controller=False)),
                       cluster_2x8)
  s = _parts(spread)
  assert s["reward"] == pytest.approx(t["reward"] / cluster_2x8.cpu_cores, rel=1e-5)
  assert float(spread.step_time_s) == pytest.approx(
      sum(v for n, v in s.items() if n != "reward"), rel=1e-5)


def test_colocated_ppo_timeline_respects_the_stage_graph(ppo_job, cluster_2x8):
  est = cm.estimate(ppo_job, cm.Plan.colocated(ppo_job, cluster_2x8), cluster_2x8)
  assert float(est.step_time_s) == pytest.approx(float(np.max(est.end_s)), rel=1e-6)
  _assert_consistent_timeline(ppo_job, est, synchronous=True)


@pytest.mark.parametrize("placement,mode", [
    ("colocated", cm.Mode()), ("split", cm.Mode()),
    ("split", cm.Mode(staleness=1, partial_rollout=True)),
    ("split", cm.Mode(rollout_log_probs=True))])
def test_stage_names_and_durations_without_the_timeline(ppo_job, cluster_2x8, placement, mode):
  """``cmi.stage_names`` names the estimate's stages without costing them (the
  switch only where a role shares the rollout pool, no old log-prob pass where
  the engine returns it), and ``duration_s`` is each stage's end minus start."""
  if placement == "colocated":
    plan = cm.Plan.colocated(ppo_job, cluster_2x8, mode=mode)
  else:
    plan = cm.Plan.split(ppo_job, cluster_2x8, 8, mode=mode, engine=cm.Engine(tp=1.0))
  est = cm.estimate(ppo_job, plan, cluster_2x8)
  assert cmi.stage_names(ppo_job, plan) == est.stage_names
  assert ("switch" in est.stage_names) == (placement == "colocated")
  assert ("old_log_prob" in est.stage_names) == (not mode.rollout_log_probs)
  end = np.asarray(est.end_s)
  np.testing.assert_allclose(est.duration_s, end - np.asarray(est.start_s), rtol=1e-6,
                             atol=1e-6 * end.max())
  np.testing.assert_allclose(est.duration_s, np.asarray(est.time_parts_s).sum(-1), rtol=1e-5)


# ----- split pools: synchronous and asynchronous ----------------------------


def _split(job, cluster, mode, gen_gpus=4, **kw):
  kw.setdefault("engine", cm.Engine(tp=1.0))
  return cm.estimate(job, cm.Plan.split(job, cluster, gen_gpus, mode=mode, **kw), cluster)


def test_staleness_zero_is_synchronous(grpo_job, cluster_2x8):
  sync = _split(grpo_job, cluster_2x8, cm.Mode())
  zero = _split(grpo_job, cluster_2x8, cm.Mode(staleness=0))
  assert zero.mode == sync.mode == "sync"
  for field in ("step_time_s", "start_s", "end_s", "time_parts_s", "pool_busy_s"):
    np.testing.assert_array_equal(np.asarray(getattr(zero, field)),
                                  np.asarray(getattr(sync, field)))
  # Synchronous: the training pool waits for the rollouts, the step is the
  # makespan.
  t = dict(zip(sync.stage_names, np.asarray(sync.start_s), strict=True))
  end = dict(zip(sync.stage_names, np.asarray(sync.end_s), strict=True))
  assert t["reference"] >= end["generate"]
  assert float(sync.step_time_s) == pytest.approx(float(np.max(sync.end_s)), rel=1e-6)
  _assert_consistent_timeline(grpo_job, sync, synchronous=True)


@pytest.mark.parametrize("gen_gpus", [4, 8, 12])
def test_async_step_is_the_busier_pool(grpo_job, cluster_2x8, gen_gpus):
  sync = _split(grpo_job, cluster_2x8, cm.Mode(), gen_gpus)
  stale = _split(grpo_job, cluster_2x8, cm.Mode(staleness=1), gen_gpus)
  t = _parts(stale)
  gen_pool = t["generate"] + t["weight_sync"]
  train_pool = sum(v for n, v in t.items()
                   if stale.stage_pools[stale.stage_names.index(n)] == "train")
  assert "weight_sync" in [n for n, p in zip(stale.stage_names, stale.stage_pools, strict=True)
                           if p == "train"]
  assert float(stale.step_time_s) == pytest.approx(max(gen_pool, train_pool), rel=1e-5)
  busy = dict(zip(stale.pool_names, np.asarray(stale.pool_busy_s), strict=True))
  assert busy["gen"] == pytest.approx(gen_pool, rel=1e-5)
  assert busy["train"] == pytest.approx(train_pool, rel=1e-5)
  assert float(stale.step_time_s) <= float(sync.step_time_s) * (1 + 1e-6)
  _assert_consistent_timeline(grpo_job, stale, synchronous=False)


def test_more_staleness_never_lengthens_the_step(grpo_job, cluster_2x8):
  steps = [float(_split(grpo_job, cluster_2x8, cm.Mode(staleness=k)).step_time_s)
           for k in (0, 1, 2)]
  assert steps[0] >= steps[1] >= steps[2]


def test_staleness_needs_generation_apart_from_training(grpo_job, cluster_2x8):
  with pytest.raises(ValueError, match=r"staleness=1 needs the rollout pool 'all'"):
    cm.estimate(grpo_job, cm.Plan.colocated(grpo_job, cluster_2x8, mode=cm.Mode(staleness=1)),
                cluster_2x8)


def test_partial_rollouts_never_lengthen_generation(grpo_job, cluster_2x8):
  full = _split(grpo_job, cluster_2x8, cm.Mode(staleness=1))
  partial = _split(grpo_job, cluster_2x8, cm.Mode(staleness=1, partial_rollout=True))
  assert _parts(partial)["generate"] < _parts(full)["generate"]
  assert float(partial.step_time_s) <= float(full.step_time_s)
  # Only generation changes.
  for name in ("reference", "old_log_prob", "actor_update", "weight_sync"):
    assert _parts(partial)[name] == pytest.approx(_parts(full)[name], rel=1e-6)


# ----- scaling ---------------------------------------------------------------


def test_actor_update_never_slower_with_more_gpus(grpo_7b, h100):
  times = []
  for nodes in (2, 4, 8):  # 16, 32, 64 GPUs
    cluster = cm.Cluster(h100, 8, nodes)
    plan = cm.Plan.colocated(grpo_7b, cluster, train=cm.Parallel(tp=2.0, micro_batch=2.0),
                             engine=cm.Engine(tp=2.0))
    est = cm.estimate(grpo_7b, plan, cluster)
    # The fixed per-step overheads (the trainer call, the batch hand-off
    # through the controller) do not scale with the GPUs: left out of the
    # ratio below since they were modelled.
    times.append(_parts(est)["actor_update"] - est.stage("actor_update")["overhead_s"])
  assert times[0] >= times[1] >= times[2]
  # Compute bound: twice the GPUs, close to half the time.
  assert times[1] / times[0] == pytest.approx(0.5, abs=0.05)


# ----- fusion ------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["colocated", "split"])
def test_fuse_inference_never_lengthens_the_step(ppo_7b, cluster_2x8, placement):
  def est(mode):
    if placement == "colocated":
      plan = cm.Plan.colocated(ppo_7b, cluster_2x8, train=cm.Parallel(tp=2.0),
                               engine=cm.Engine(tp=2.0), mode=mode)
    else:
      plan = cm.Plan.split(ppo_7b, cluster_2x8, 8, train=cm.Parallel(tp=2.0),
                           engine=cm.Engine(tp=2.0), mode=mode)
    return cm.estimate(ppo_7b, plan, cluster_2x8)

  plain, fused = est(cm.Mode()), est(cm.Mode(fuse_inference=True))
  assert float(fused.step_time_s) <= float(plain.step_time_s)
  a, b = _parts(plain), _parts(fused)
  for name in ("reward", "reference", "old_log_prob", "values"):
    assert b[name] <= a[name]
  for name in ("generate", "critic_update", "actor_update", "weight_sync"):
    assert b[name] == pytest.approx(a[name], rel=1e-6)


def test_fuse_inference_hides_at_most_the_tail_window(ppo_7b, cluster_2x8):
  # The inference stages of finished samples overlap the generation tail; one
  # tail window (the code's 0.5 * tail time) is shared by all of them.
  def est(mode):
    plan = cm.Plan.split(ppo_7b, cluster_2x8, 8, train=cm.Parallel(tp=2.0),
                         engine=cm.Engine(tp=2.0), mode=mode)
    return cm.estimate(ppo_7b, plan, cluster_2x8)

  plain, fused = est(cm.Mode()), est(cm.Mode(fuse_inference=True))
  a, b = _parts(plain), _parts(fused)
  hidden = sum(a[n] - b[n] for n in ("reward", "reference", "old_log_prob", "values"))
  # The tail's share of the decode time, applied to the whole stage: an
  # upper bound on the tail's seconds.
  tail_s = float(plain.gen_tail_share) * a["generate"]
  assert hidden <= 0.5 * tail_s * (1 + 1e-6)


def test_fuse_training_needs_a_critic_on_the_actors_pool(grpo_job, ppo_job, cluster_2x8):
  fuse = cm.Mode(fuse_training=True)
  with pytest.raises(ValueError, match="fuse_training=True needs a critic"):
    cm.estimate(grpo_job, cm.Plan.colocated(grpo_job, cluster_2x8, mode=fuse), cluster_2x8)
  plan = cm.Plan(pools=(cm.Pool("gen", 4.0), cm.Pool("actor", 8.0), cm.Pool("critic", 4.0)),
                 roles=(cm.RolePlan("actor", "actor", train=cm.Parallel()),
                        cm.RolePlan("reference", "actor", infer=cm.Parallel()),
                        cm.RolePlan("critic", "critic", train=cm.Parallel())),
                 engine=cm.Engine(), rollout_pool="gen", mode=fuse)
  with pytest.raises(ValueError, match="fuse_training=True needs a critic on the actor's pool"):
    cm.validate_plan(ppo_job, plan, cluster_2x8)
  cm.validate_plan(ppo_job, plan.replace(mode=cm.Mode()), cluster_2x8)  # valid unfused


@pytest.mark.parametrize("pp", [1.0, 4.0])
def test_fuse_training_never_lengthens_the_step(ppo_job, cluster_2x8, pp):
  def est(mode):
    plan = cm.Plan.colocated(ppo_job, cluster_2x8, train=cm.Parallel(pp=pp, micro_batch=2.0),
                             mode=mode)
    return cm.estimate(ppo_job, plan, cluster_2x8)

  plain, fused = est(cm.Mode()), est(cm.Mode(fuse_training=True))
  assert float(fused.step_time_s) <= float(plain.step_time_s) * (1 + 1e-6)
  # One pipeline for both: the critic's bubble is filled by the actor's, so
  # it shrinks by min(actor bubble, critic bubble).
  bubble = dict(zip(plain.stage_names, np.asarray(plain.time_parts_s)[:, 3], strict=True))
  saved = min(bubble["actor_update"], bubble["critic_update"])
  if pp == 1.0:
    assert saved == 0.0
  else:
    assert saved > 0.0
  assert _parts(plain)["critic_update"] - _parts(fused)["critic_update"] == pytest.approx(
      saved, rel=1e-4, abs=1e-6)


# ----- feasibility -------------------------------------------------------------


def test_infeasible_plan_is_reported_not_raised(cluster_2x8):
  job = cm.RLJob("grpo", cm.models.get("qwen2.5-32b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(500.0, 2048.0))
  plan = cm.Plan.colocated(job, cluster_2x8, train=cm.Parallel(tp=1.0, zero_stage=0.0),
                           engine=cm.Engine(tp=1.0))
  est = cm.estimate(job, plan, cluster_2x8)
  assert not bool(est.feasible)
  assert np.isfinite(float(est.step_time_s))
  assert len(est.violations) >= 1
  assert all("GiB" in v and "short by" in v for v in est.violations)
  assert "INFEASIBLE" in est.summary()
  # Stages over their limit are exactly the violations.
  over = np.asarray(est.memory_bytes).sum(-1) > np.asarray(est.memory_limit_bytes)
  assert len(est.violations) == int(over.sum())


def test_feasible_plan_has_no_violations(grpo_job, cluster_2x8):
  est = cm.estimate(grpo_job, cm.Plan.colocated(grpo_job, cluster_2x8), cluster_2x8)
  assert bool(est.feasible)
  assert est.violations == ()
  assert "INFEASIBLE" not in est.summary()


def test_switch_holds_the_resident_training_bytes_once(h100):
  # Llama-3.1-8B, ZeRO-1 over 8 GPUs, no offload: actor weights (15 GiB),
  # its Adam shard (11 GiB) and the reference weights (15 GiB) stay resident:
  # 41 GiB per GPU. Generation (engine at 30% of HBM + the resident bytes)
  # fits; the switch moves the engine and holds no more than that.
  cluster = cm.Cluster(h100, 8, 1)
  job = cm.RLJob("grpo", cm.models.get("llama-3.1-8b"), prompts_per_step=32.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(500.0, 2048.0))
  plan = cm.Plan.colocated(job, cluster, train=cm.Parallel(tp=1.0, zero_stage=1.0),
                           engine=cm.Engine(tp=1.0, memory_fraction=0.3))
  est = cm.estimate(job, plan, cluster)
  mem = dict(zip(est.stage_names, np.asarray(est.memory_bytes).sum(-1), strict=True))
  psi = float(job.actor.total_params)
  resident = 2 * psi + 12 * psi / 8 + 2 * psi
  assert mem["switch"] == pytest.approx(resident, rel=1e-4)
  assert bool(est.feasible), est.violations


# ----- throughput and bounds ---------------------------------------------------


@pytest.mark.parametrize("placement", ["colocated", "split", "async"])
def test_throughput_fields_agree_with_the_job(grpo_job, cluster_2x8, placement):
  if placement == "colocated":
    est = cm.estimate(grpo_job, cm.Plan.colocated(grpo_job, cluster_2x8), cluster_2x8)
  else:
    mode = cm.Mode(staleness=1) if placement == "async" else cm.Mode()
    est = _split(grpo_job, cluster_2x8, mode)
  samples = 64.0 * 8.0
  tokens = samples * (512.0 + float(grpo_job.response.mean))
  step = float(est.step_time_s)
  assert float(est.tokens_per_s) * step == pytest.approx(tokens, rel=1e-5)
  assert float(est.samples_per_s) * step == pytest.approx(samples, rel=1e-5)
  assert float(est.tokens_per_s_per_gpu) * 16.0 == pytest.approx(float(est.tokens_per_s),
                                                                 rel=1e-5)
  assert 0.0 < float(est.mfu) < 1.0
  assert 0.0 < float(est.lower_bound_s) <= step


# ----- algorithms --------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["ppo", "grpo", "dapo", "reinforce_pp", "rloo", "remax"])
def test_every_algorithm_estimates(cluster_2x8, algorithm):
  job = cm.RLJob(algorithm, cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=8.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
  est = cm.estimate(job, cm.Plan.colocated(job, cluster_2x8), cluster_2x8)
  assert np.isfinite(float(est.step_time_s)) and float(est.step_time_s) > 0
  assert bool(est.feasible)
  names = set(est.stage_names)
  assert {"generate", "old_log_prob", "actor_update", "weight_sync"} <= names
  assert ({"values", "critic_update"} <= names) == (algorithm == "ppo")
  assert ("reference" in names) == (algorithm != "dapo")
  _assert_consistent_timeline(job, est, synchronous=True)


def test_remax_generates_a_greedy_baseline_more(cluster_2x8):
  def est(algorithm):
    job = cm.RLJob(algorithm, cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                   samples_per_prompt=8.0, prompt_len=512.0,
                   response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
    return cm.estimate(job, cm.Plan.colocated(job, cluster_2x8), cluster_2x8)

  grpo, remax = est("grpo"), est("remax")
  assert _parts(remax)["generate"] > _parts(grpo)["generate"]
  # One more (greedy) rollout per prompt: 64 x 9 sequences instead of 64 x 8.
  assert float(remax.work_gpu_s[0] / grpo.work_gpu_s[0]) == pytest.approx(9.0 / 8.0, rel=1e-5)
  # Training sees the same samples.
  assert _parts(remax)["actor_update"] == pytest.approx(_parts(grpo)["actor_update"], rel=1e-6)


# ----- bad plans ---------------------------------------------------------------


@pytest.mark.parametrize("gen_gpus", [0, -4, 16, 32])
def test_split_rejects_gen_gpus_outside_the_cluster(grpo_job, cluster_2x8, gen_gpus):
  with pytest.raises(ValueError, match=rf"gen_gpus={gen_gpus} must lie in \(0, 16\)"):
    cm.Plan.split(grpo_job, cluster_2x8, gen_gpus)


@pytest.mark.parametrize("placement,kwargs,message", [
    ("colocated", dict(train=cm.Parallel(tp=3.0)),
     r"actor train layout: tp\*pp\*cp=3 must divide the pool's 16 GPUs"),
    ("split", dict(train=cm.Parallel(tp=2.0, pp=8.0)),
     r"actor train layout: tp\*pp\*cp=16 must divide the pool's 8 GPUs"),
    ("colocated", dict(train=cm.Parallel(tp=16.0)), r"tp=16 must divide n_heads=12"),
    ("split", dict(train=cm.Parallel(tp=8.0)), r"tp=8 must divide n_heads=12"),
    ("colocated", dict(train=cm.Parallel(ep=2.0)), r"ep=2 needs an MoE model"),
    ("split", dict(infer=cm.Parallel(cp=16.0)), r"infer layout: tp\*pp\*cp=16 must divide"),
    ("colocated", dict(engine=cm.Engine(tp=16.0)), r"engine tp=16 must divide n_heads=12"),
    ("split", dict(engine=cm.Engine(tp=16.0)),
     r"engine tp\*pp=16 must divide the rollout pool's 8 GPUs"),
])
def test_bad_layouts_raise_naming_the_field(grpo_job, cluster_2x8, placement, kwargs, message):
  if placement == "colocated":
    plan = cm.Plan.colocated(grpo_job, cluster_2x8, **kwargs)
  else:
    plan = cm.Plan.split(grpo_job, cluster_2x8, 8, **kwargs)
  with pytest.raises(ValueError, match=message):
    cm.validate_plan(grpo_job, plan, cluster_2x8)
  with pytest.raises(ValueError, match=message):
    cm.estimate(grpo_job, plan, cluster_2x8)


def test_split_with_a_fractional_pool_is_rejected(grpo_job, cluster_2x8):
  plan = cm.Plan.split(grpo_job, cluster_2x8, 2.5)
  with pytest.raises(ValueError, match=r"pool 'gen' gpus=2.5 must be a positive integer"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_bad_reward_cost_per_sample_names_the_field(bad):
  with pytest.raises(ValueError, match=r"RLJob: reward_cpu_s_per_sample=.* must be a finite "
                                       r"number >= 0"):
    cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), reward_cpu_s_per_sample=bad)
