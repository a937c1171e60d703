"""Agentic multi-turn rollouts: tool latency, asynchronous overlap, KV reuse
across turns, environment CPU contention."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.stages import agentic

NO_TOOLS = cm.MultiTurn(turns=4, tool_latency_s_mean=0.0, tool_latency_s_max=0.0,
                        env_cpu_s=0.0, observation_tokens=256.0)
SLOW_TOOLS = NO_TOOLS.replace(tool_latency_s_mean=2.0, tool_latency_s_max=10.0)
CLUSTER = cm.Cluster(cm.hardware.get("H100"), 8, 1)


def _job(mt, prompts=32.0):
  return cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=prompts,
                  samples_per_prompt=8.0, prompt_len=1024.0,
                  response=cm.ResponseLength.from_mean_max(200.0, 800.0), multi_turn=mt)


def _plan(job):
  return cm.Plan.colocated(job, CLUSTER, train=cm.Parallel(micro_batch=2.0, recompute=2.0),
                           engine=cm.Engine(tp=1.0))


def _gen(mt, prompts=32.0):
  job = _job(mt, prompts)
  return cm.estimate(job, _plan(job), CLUSTER)


def test_spec_rejects_bad_input():
  with pytest.raises(ValueError, match="turns"):
    cm.MultiTurn(turns=0)
  with pytest.raises(ValueError, match="tool_latency_s_max"):
    cm.MultiTurn(tool_latency_s_mean=3.0, tool_latency_s_max=1.0)
  with pytest.raises(ValueError, match="env_cpu_s"):
    cm.MultiTurn(env_cpu_s=-1.0)
  with pytest.raises(ValueError, match="multi_turn"):
    _job(4)


def test_tool_latency_lengthens_a_synchronous_step_by_its_tail():
  fast, slow = _gen(NO_TOOLS), _gen(SLOW_TOOLS)
  # Three tool rounds, each waiting for the slowest call (10 s).
  assert slow.stage("generate")["time_s"] - fast.stage("generate")["time_s"] == (
      pytest.approx(3 * 10.0, rel=1e-5))
  assert slow.stage("generate")["bubble_s"] == pytest.approx(30.0, rel=1e-5)
  assert float(slow.step_time_s) > float(fast.step_time_s)


def test_asynchronous_rollouts_hide_tool_latency_with_more_episodes():
  exposed = []
  for prompts in (8.0, 32.0, 128.0):
    base = _gen(NO_TOOLS.replace(overlap_tools=True), prompts).stage("generate")["time_s"]
    hidden = _gen(SLOW_TOOLS.replace(overlap_tools=True), prompts).stage("generate")["time_s"]
    synced = _gen(SLOW_TOOLS, prompts).stage("generate")["time_s"]
    exposed.append(hidden - base)
    assert hidden < synced
  # The more episodes fill the engine, the less of the latency shows.
  assert exposed[0] > exposed[1] > exposed[2] >= 0.0
  assert exposed[2] < 0.25 * 30.0


def test_prefix_caching_across_turns_lowers_prefill():
  job = _job(NO_TOOLS)
  plan = _plan(job)
  gpus = {p.name: float(p.gpus) for p in plan.pools}
  kw = dict(model=job.actor, engine=plan.engine, pool_gpus=gpus["all"], cluster=CLUSTER,
            eff=cm.Efficiency())
  reuse = agentic.generate(job=job, **kw)
  again = agentic.generate(job=_job(NO_TOOLS.replace(kv_reuse=False)), **kw)
  assert float(reuse.extras["turn_prefill_s"]) < 0.5 * float(again.extras["turn_prefill_s"])
  assert float(reuse.time_s) < float(again.time_s)
  # Decode is the same either way.
  assert float(reuse.extras["decode_s"]) == pytest.approx(float(again.extras["decode_s"]))


def test_turn_contexts_and_trajectory():
  job = _job(NO_TOOLS)
  mean = float(job.response.mean)
  assert float(agentic.turn_context(job, 2)) == pytest.approx(1024 + 2 * (mean + 256))
  traj = agentic.trajectory_job(job)
  # prompt + 3 observations of context, 4 turns of output.
  assert float(traj.prompt_len) == pytest.approx(1024 + 3 * 256)
  assert float(traj.response.mean) == pytest.approx(4 * mean)
  assert traj.multi_turn is None


def test_environment_cpu_contention_saturates():
  mt = NO_TOOLS.replace(env_cpu_s=0.5, env_cores=64)
  rates = []
  for prompts in (2.0, 8.0, 32.0, 128.0):
    job = _job(mt, prompts)
    n = float(job.generated_samples_per_step)
    rates.append(n / float(agentic.env_call_s(job, CLUSTER)))  # calls per second
  # 16 calls fit 64 cores: 0.5 s each; past 64 calls the rate is capped at
  # cores / env_cpu_s = 128 calls/s.
  assert rates[0] == pytest.approx(16 / 0.5)
  assert rates[1] == pytest.approx(128.0)
  assert rates[2] == pytest.approx(128.0) and rates[3] == pytest.approx(128.0)
  slow = _gen(mt, 128.0).stage("generate")["bubble_s"]
  assert slow == pytest.approx(3 * 0.5 * 1024 / 64, rel=1e-5)


def test_multi_turn_trains_on_whole_episodes():
  single = cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), prompts_per_step=32.0,
                    samples_per_prompt=8.0, prompt_len=1024.0,
                    response=cm.ResponseLength.from_mean_max(200.0, 800.0))
  multi = cm.estimate(_job(NO_TOOLS), _plan(single), CLUSTER)
  one = cm.estimate(single, _plan(single), CLUSTER)
  # Training time follows the tokens: 1024 + 3 x 256 + 4 x 200 per episode
  # against 1024 + 200 per single-turn sample.
  # (The fixed per-call trainer overhead does not scale with tokens.)
  busy = lambda e: e.stage("actor_update")["time_s"] - e.stage("actor_update")["overhead_s"]
  ratio = busy(multi) / busy(one)
  tokens = (1024 + 3 * 256 + 4 * 200) / (1024 + 200)
  assert 0.9 * tokens < ratio < 1.2 * tokens


def test_multi_turn_estimate_differentiates():
  job = _job(SLOW_TOOLS.replace(overlap_tools=True))
  plan = _plan(job)
  g = jax.grad(lambda p: cm.estimate(job, p, CLUSTER, tau=0.05).step_time_s)(plan)
  assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(g))


def test_turns_sum_one_turn_at_a_time():
  # The turns are traced as one vmapped program; the stage equals the sum of
  # each turn computed on its own with its concrete index.
  job = _job(NO_TOOLS)
  plan = _plan(job)
  gpus = {p.name: float(p.gpus) for p in plan.pools}
  args = (job.actor, job, plan.engine, gpus["all"], CLUSTER, cm.Efficiency(), 0.0)
  whole = agentic.generate(*args)
  turns = [agentic._turn(*args, t, t == 3) for t in range(4)]
  for f in ("compute_s", "memory_s", "comm_s", "work_gpu_s", "flops"):
    assert float(getattr(whole, f)) == pytest.approx(sum(float(getattr(c, f)) for c in turns),
                                                     rel=1e-6)
  assert float(whole.extras["turn_prefill_s"]) == pytest.approx(
      sum(float(c.extras["prefill_s"]) for c in turns), rel=1e-6)


def test_traced_program_does_not_grow_with_turns():
  # One turn's generation model is thousands of jaxpr equations; the turns
  # share one traced program, so 26 more turns add only their sums.
  def eqns(mt):
    job = _job(mt)
    return len(jax.make_jaxpr(lambda p: cm.estimate(job, p, CLUSTER).step_time_s)(
        _plan(job)).jaxpr.eqns)

  single, four, thirty = eqns(None), eqns(NO_TOOLS), eqns(NO_TOOLS.replace(turns=30))
  assert thirty - four < 0.5 * single
  assert thirty < 3 * single


def test_an_eager_estimate_compiles_its_early_turns_as_one_program():
  # Eagerly each batched operation of the turns would compile on its own; one
  # program serves every job of the structure (here 3 turns and another
  # number of episodes), with the numbers of the traced estimate.
  mt = NO_TOOLS.replace(turns=3, observation_tokens=128.0)
  before = agentic._early_turns_jit._cache_size()
  eager = [_gen(mt, prompts) for prompts in (16.0, 48.0)]
  assert agentic._early_turns_jit._cache_size() == before + 1
  for prompts, est in zip((16.0, 48.0), eager, strict=True):
    job = _job(mt, prompts)
    traced = jax.jit(lambda p, job=job: cm.estimate(job, p, CLUSTER))(_plan(job))
    for f in ("step_time_s", "memory_bytes"):
      np.testing.assert_allclose(getattr(est, f), getattr(traced, f), rtol=1e-6)
  assert float(eager[1].step_time_s) > float(eager[0].step_time_s)
