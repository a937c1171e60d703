"""Estimate.memory_excess: zero when a plan fits, the search's memory penalty."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.stages import generate as gen_lib
from search._src import space as space_lib


def _big_job():
  return cm.RLJob("grpo", cm.models.get("qwen2.5-32b"), prompts_per_step=64.0,
                  samples_per_prompt=4.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(500.0, 2048.0))


def test_zero_for_a_plan_that_fits(grpo_job, cluster_2x8):
  est = cm.estimate(grpo_job, cm.Plan.colocated(grpo_job, cluster_2x8), cluster_2x8)
  assert bool(est.feasible)
  assert est.memory_excess.shape == (len(est.stage_names),)
  np.testing.assert_array_equal(np.asarray(est.memory_excess), 0.0)


def test_positive_where_a_stage_does_not_fit(cluster_2x8):
  job = _big_job()
  plan = cm.Plan.colocated(job, cluster_2x8, train=cm.Parallel(tp=1.0, zero_stage=0.0),
                           engine=cm.Engine(tp=1.0))
  est = cm.estimate(job, plan, cluster_2x8)
  assert not bool(est.feasible)
  need = np.asarray(est.memory_bytes).sum(-1)
  limit = np.asarray(est.memory_limit_bytes)
  excess = np.asarray(est.memory_excess)
  for i, name in enumerate(est.stage_names):
    if name == "generate":
      continue  # also holds the engine's own budget (next test)
    want = max(need[i] / (limit[i] * (1 + 1e-6)) - 1.0, 0.0)
    assert excess[i] == pytest.approx(want, rel=1e-5, abs=1e-12), name
  # ZeRO-0 Adam of a 32B model on one GPU: 16 bytes/param, over 6x the 80 GiB.
  i = est.stage_names.index("actor_update")
  assert excess[i] > 5.0
  assert len(est.violations) == int((excess > 0).sum())


def test_generate_row_holds_the_engine_budget(grpo_job, cluster_2x8):
  # The engine's budget (memory_fraction x HBM) cannot hold its weights,
  # workspace and one longest sequence: infeasible although the stage's own
  # row fits in HBM.
  engine = cm.Engine(tp=1.0, memory_fraction=0.04)
  plan = cm.Plan.split(grpo_job, cluster_2x8, 8, engine=engine)
  est = cm.estimate(grpo_job, plan, cluster_2x8)
  g = est.stage_names.index("generate")
  row = np.asarray(est.memory_bytes)[g]
  limit = float(est.memory_limit_bytes[g])
  assert row.sum() <= limit
  hbm = cluster_2x8.accelerator.hbm_bytes
  kv = float(gen_lib.kv_bytes_per_token_per_gpu(grpo_job.actor, engine, grpo_job.kv_bytes))
  need = row[0] + row[6] + (512.0 + float(grpo_job.response.max)) * kv
  want = need / (0.04 * hbm) - 1.0
  assert want > 0
  assert float(est.memory_excess[g]) == pytest.approx(want, rel=1e-5)
  assert not bool(est.feasible)
  assert "memory_fraction" in est.violations[0]


def test_search_penalty_reads_the_estimate(grpo_job, cluster_2x8):
  plan = cm.Plan.colocated(_big_job(), cluster_2x8, train=cm.Parallel(tp=1.0, zero_stage=0.0),
                           engine=cm.Engine(tp=1.0))
  est = cm.estimate(_big_job(), plan, cluster_2x8)
  got = space_lib.memory_excess(None, None, est, None, None)
  assert float(got) == pytest.approx(float(np.asarray(est.memory_excess).sum()), rel=1e-6)
  assert float(got) > 0


def test_smooth_with_finite_gradients_at_positive_tau(x64, cluster_2x8):
  job = _big_job()
  plan = cm.Plan.colocated(job, cluster_2x8, train=cm.Parallel(tp=2.0, zero_stage=1.0),
                           engine=cm.Engine(tp=2.0))

  def excess(frac, tp, tau):
    roles = tuple(dataclasses.replace(r, train=r.train.replace(tp=tp))
                  if r.train is not None else r for r in plan.roles)
    p = plan.replace(engine=plan.engine.replace(memory_fraction=frac), roles=roles)
    return jnp.sum(cm.estimate(job, p, cluster_2x8, tau=tau).memory_excess)

  tau = 0.1
  x = (jnp.asarray(0.6), jnp.asarray(2.0))
  value = float(excess(*x, tau))
  grads = jax.grad(excess, argnums=(0, 1))(*x, tau)
  assert value > 0
  for g in grads:
    assert np.isfinite(float(g))
  assert float(grads[1]) < 0  # more tensor parallelism, less memory per GPU
  h = 1e-5
  fd = (excess(x[0], x[1] + h, tau) - excess(x[0], x[1] - h, tau)) / (2 * h)
  assert float(grads[1]) == pytest.approx(float(fd), rel=1e-4)
  # The relaxed excess tends to the exact one as tau -> 0.
  exact = float(excess(*x, 0.0))
  assert float(excess(*x, 1e-4)) == pytest.approx(exact, rel=1e-2)


def test_relu_flat_is_exact_at_zero_and_vanishes_where_the_constraint_holds():
  from costmodel._src.ops import smooth
  x = jnp.asarray([-2.0, -1e-3, 0.0, 0.01, 0.05, 0.1, 0.5, 3.0])
  np.testing.assert_array_equal(np.asarray(smooth.relu_flat(x, 1.0, 0.0)),
                                np.maximum(np.asarray(x), 0.0))
  soft = np.asarray(smooth.relu_flat(x, 1.0, 0.1))
  np.testing.assert_array_equal(soft[:3], 0.0)
  # w = 0.1: quadratic x^2 / 0.2 up to w, then x - 0.05.
  np.testing.assert_allclose(soft[3:], [0.0005, 0.0125, 0.05, 0.45, 2.95], rtol=1e-6)
  g = jax.vmap(jax.grad(lambda v: smooth.relu_flat(v, 1.0, 0.1)))(x)
  np.testing.assert_allclose(np.asarray(g), [0, 0, 0, 0.1, 0.5, 1.0, 1.0, 1.0], atol=1e-6)
  g0 = jax.vmap(jax.grad(lambda v: smooth.relu_flat(v, 1.0, 0.0)))(x)
  assert np.all(np.isfinite(np.asarray(g0)))
