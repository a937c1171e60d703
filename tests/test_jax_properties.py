"""JAX properties of the cost model: gradients, tracing, batching, dtypes.

Gradients are checked against central finite differences in float64 (enabled
per test by the ``x64`` fixture); the relaxed model (``tau > 0``) is checked
for finite values and gradients over random inputs with hypothesis.
"""

import dataclasses

import chex
from conftest import assert_tree_allclose
import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.ops import collectives
from costmodel._src.ops import roofline

# ----- a small job, built inside each test so its dtype follows the x64 flag --


def _job():
  return cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                  samples_per_prompt=8.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


def _cluster():
  return cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)


def _split_plan(job, cluster, gen_gpus=8, engine_tp=2.0, train_tp=2.0, micro_batch=2.0, **kw):
  return cm.Plan.split(job, cluster, gen_gpus,
                       train=cm.Parallel(tp=train_tp, micro_batch=micro_batch, **kw),
                       engine=cm.Engine(tp=engine_tp))


def _with_layout(plan, theta):
  """``plan`` with the continuous layout leaves taken from ``theta``."""
  layout = dict(tp=theta["train_tp"], micro_batch=theta["micro_batch"])
  roles = tuple(
      dataclasses.replace(r, train=r.train and r.train.replace(**layout),
                          infer=r.infer and r.infer.replace(**layout))
      for r in plan.roles)
  pools = tuple(cm.Pool(p.name, theta["gen_gpus"] if p.name == plan.rollout_pool else p.gpus)
                for p in plan.pools)
  engine = plan.engine.replace(tp=theta["engine_tp"], memory_fraction=theta["memory_fraction"])
  return plan.replace(roles=roles, pools=pools, engine=engine)


def _central_difference(f, theta, key, rel_step=1e-4):
  x = theta[key]
  h = rel_step * abs(x)
  up = dict(theta, **{key: x + h})
  down = dict(theta, **{key: x - h})
  return (float(f(up)) - float(f(down))) / (2 * h)


def _check_gradients(f, theta, rtol):
  grads = jax.jit(jax.grad(f))(theta)
  f_jit = jax.jit(f)
  for key in theta:
    g = float(grads[key])
    fd = _central_difference(f_jit, theta, key)
    assert np.isfinite(g), key
    assert g == pytest.approx(float(fd), rel=rtol, abs=1e-9 * abs(float(f_jit(theta)))), key
  return grads


# ----- gradients against finite differences -----------------------------------


def test_relaxed_step_time_gradients_wrt_layout_match_finite_differences(x64):
  job, cluster = _job(), _cluster()
  plan = _split_plan(job, cluster)
  # Off-integer points: the relaxed model is smooth there.
  theta = {"engine_tp": 2.5, "train_tp": 1.7, "micro_batch": 2.5, "gen_gpus": 7.3,
           "memory_fraction": 0.07}  # low enough for the KV cache to bind
  theta = {k: jnp.asarray(v, jnp.float64) for k, v in theta.items()}

  def step(th):
    return cm.estimate(job, _with_layout(plan, th), cluster, tau=0.1).step_time_s

  grads = _check_gradients(step, theta, rtol=1e-4)
  # No silent downcast: float64 in, float64 out.
  assert jax.jit(step)(theta).dtype == jnp.float64
  assert all(g.dtype == jnp.float64 for g in grads.values())
  # More rollout GPUs shorten the step (generation is on the critical path).
  assert float(grads["gen_gpus"]) < 0


def test_exact_step_time_gradients_wrt_hardware_and_efficiency(x64):
  job, cluster = _job(), _cluster()
  plan = _split_plan(job, cluster)
  hw0 = cluster.accelerator
  theta = {"hbm": hw0.hbm_bandwidth_bytes_per_s, "peak": hw0.peak_flops_per_s,
           "scaleup": hw0.scaleup_bandwidth_bytes_per_s,
           "matmul_half_rows": 48.0, "memory_half_time_s": 0.5e-6, "matmul_exponent": 1.0,
           "decode_step_overhead_s": 1.5e-3, "attention_efficiency": 0.7}
  theta = {k: jnp.asarray(v, jnp.float64) for k, v in theta.items()}

  def step(th):
    hw = cluster.accelerator.replace(hbm_bandwidth_bytes_per_s=th["hbm"],
                                     peak_flops_per_s=th["peak"],
                                     scaleup_bandwidth_bytes_per_s=th["scaleup"])
    eff = dataclasses.replace(cm.Efficiency(), **{
        k: th[k] for k in ("matmul_half_rows", "memory_half_time_s", "matmul_exponent",
                           "decode_step_overhead_s", "attention_efficiency")})
    return cm.estimate(job, plan, cluster.replace(accelerator=hw), efficiency=eff,
                       tau=0.0).step_time_s

  grads = _check_gradients(step, theta, rtol=1e-4)
  # Faster hardware, shorter step; more overhead, longer step.
  assert float(grads["hbm"]) < 0 and float(grads["peak"]) < 0
  assert float(grads["decode_step_overhead_s"]) > 0


def test_roofline_gradients_are_the_hand_derived_ones(x64):
  # The decode tile set to the half point keeps the plain row curve.
  hw, eff = cm.hardware.get("H100"), cm.Efficiency(matmul_tile_rows=48.0)
  rows = 4096.0
  e_mm = hw.matmul_efficiency_max / (1 + eff.matmul_half_rows / rows)

  def time(flops, nbytes):
    return roofline.roofline(flops, nbytes, rows, hw, eff).time_s

  # Compute bound: d t / d flops = 1 / (peak e); bytes do not matter.
  g_f, g_b = jax.grad(time, argnums=(0, 1))(1e13, 1e6)
  assert float(g_f) == pytest.approx(1 / (hw.peak_flops_per_s * e_mm), rel=1e-9)
  assert float(g_b) == 0.0
  # Memory bound: t = (S / bw) (1 + t_half bw / S) / e_max, so
  # d t / d S = 1 / (bw e_max) with memory_exponent 1.
  eff1 = dataclasses.replace(eff, memory_exponent=1.0)
  g_b = jax.grad(lambda s: roofline.roofline(1e3, s, rows, hw, eff1).time_s)(1e9)
  assert float(g_b) == pytest.approx(1 / (hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency_max),
                                     rel=1e-9)
  # Relaxed: matches finite differences near the ridge, where both bounds count.
  f = lambda x: roofline.roofline(x, 2e9, rows, hw, eff, tau=0.2).time_s
  x0, h = 4e11, 4e6
  assert float(jax.grad(f)(x0)) == pytest.approx(float(f(x0 + h) - f(x0 - h)) / (2 * h),
                                                 rel=1e-6)


@pytest.mark.parametrize("kind", collectives.KINDS)
def test_collective_gradients_wrt_bytes_and_group_size(x64, kind):
  hw, eff = cm.hardware.get("H100"), cm.Efficiency()
  bu = hw.scaleup_bandwidth_bytes_per_s * hw.scaleup_efficiency
  au = hw.scaleup_latency_s

  def t(nbytes, n):
    return collectives.collective_time(kind, nbytes, n, 8.0, hw, eff, tau=0.0)

  s, n = 3e8, 5.5
  g_s, g_n = jax.grad(t, argnums=(0, 1))(s, n)
  # Inside one domain, from the alpha-beta formulas.
  expected = {
      "all_reduce": (2 * (n - 1) / n / bu, 2 * au + 2 * s / (n**2 * bu)),
      "all_gather": ((n - 1) / n / bu, au + s / (n**2 * bu)),
      "reduce_scatter": ((n - 1) / n / bu, au + s / (n**2 * bu)),
      "all_to_all": ((n - 1) / n / bu, au + s / (n**2 * bu)),
      "broadcast": (1 / bu, au),
      "p2p": (1 / bu, 0.0),
  }[kind]
  assert float(g_s) == pytest.approx(expected[0], rel=1e-9)
  assert float(g_n) == pytest.approx(expected[1], rel=1e-9, abs=1e-30)
  # Across domains in relaxed mode: finite and matching finite differences.
  f = lambda m: collectives.collective_time(kind, s, m, 8.0, hw, eff, tau=0.1)
  m0, h = 27.0, 1e-4
  fd = float(f(m0 + h) - f(m0 - h)) / (2 * h)
  assert float(jax.grad(f)(m0)) == pytest.approx(fd, rel=1e-5, abs=1e-12)


# ----- finite values and gradients over random relaxed inputs ----------------

def _relaxed_fn():
  """value_and_grad of the relaxed step time over every continuous layout leaf."""
  job, cluster = _job(), _cluster()
  plan = cm.Plan.split(job, cluster, 8, train=cm.Parallel(), engine=cm.Engine(),
                       mode=cm.Mode(staleness=1))

  def step(th, tau):
    layout = dict(tp=th["tp"], pp=th["pp"], cp=th["cp"], micro_batch=th["micro_batch"])
    roles = tuple(
        dataclasses.replace(r, train=r.train and r.train.replace(**layout),
                            infer=r.infer and r.infer.replace(**layout))
        for r in plan.roles)
    pools = (cm.Pool("gen", th["gen_gpus"]), cm.Pool("train", th["train_gpus"]))
    engine = plan.engine.replace(tp=th["engine_tp"], pp=th["engine_pp"],
                                 memory_fraction=th["memory_fraction"],
                                 max_seqs=th["max_seqs"])
    p = plan.replace(roles=roles, pools=pools, engine=engine)
    return cm.estimate(job, p, cluster, tau=tau).step_time_s

  return jax.jit(jax.value_and_grad(step))


_FN = {}

_degree = st.floats(1.0, 64.0, allow_nan=False, allow_infinity=False)


@hypothesis.settings(max_examples=50, deadline=None, derandomize=True,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(tp=_degree, pp=_degree, cp=_degree, engine_tp=_degree, engine_pp=_degree,
                  micro_batch=st.floats(0.25, 64.0), gen_gpus=st.floats(1.0, 16.0),
                  train_gpus=st.floats(1.0, 16.0), memory_fraction=st.floats(0.05, 1.0),
                  max_seqs=st.floats(1.0, 4096.0), tau=st.floats(0.01, 0.5))
def test_relaxed_model_is_finite_with_finite_gradients(tp, pp, cp, engine_tp, engine_pp,
                                                       micro_batch, gen_gpus, train_gpus,
                                                       memory_fraction, max_seqs, tau):
  if "fn" not in _FN:
    _FN["fn"] = _relaxed_fn()
  th = dict(tp=tp, pp=pp, cp=cp, engine_tp=engine_tp, engine_pp=engine_pp,
            micro_batch=micro_batch, gen_gpus=gen_gpus, train_gpus=train_gpus,
            memory_fraction=memory_fraction, max_seqs=max_seqs)
  th = {k: jnp.asarray(v, jnp.float32) for k, v in th.items()}
  value, grads = _FN["fn"](th, jnp.asarray(tau, jnp.float32))
  assert np.isfinite(float(value)) and float(value) > 0
  for k, g in grads.items():
    assert np.isfinite(float(g)), (k, float(g))


# ----- tracing, jit, vmap, dtypes ----------------------------------------------


def test_no_retrace_for_new_leaf_values_of_one_structure(grpo_job, cluster_2x8):
  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(job, plan, cluster):
    return cm.estimate(job, plan, cluster).step_time_s

  a = _split_plan(grpo_job, cluster_2x8, gen_gpus=8, engine_tp=2.0, train_tp=2.0)
  b = _split_plan(grpo_job, cluster_2x8, gen_gpus=4, engine_tp=4.0, train_tp=4.0,
                  micro_batch=4.0, zero_stage=1.0, recompute=0.0)
  ta, tb = step(grpo_job, a, cluster_2x8), step(grpo_job, b, cluster_2x8)
  # A new hardware figure and job size are leaves too.
  faster = cluster_2x8.replace(accelerator=cluster_2x8.accelerator.replace(
      hbm_bandwidth_bytes_per_s=4.8e12))
  tc = step(grpo_job.replace(prompts_per_step=128.0), a, faster)
  assert float(ta) != float(tb) and float(tc) != float(ta)
  # A different structure (another mode) is a new trace, which the guard catches.
  with pytest.raises(AssertionError, match=r"traced > 1 times"):
    step(grpo_job, a.replace(mode=cm.Mode(staleness=1)), cluster_2x8)


def test_jit_equals_no_jit(ppo_job, cluster_2x8):
  plan = cm.Plan.colocated(ppo_job, cluster_2x8, train=cm.Parallel(tp=2.0, micro_batch=2.0),
                           engine=cm.Engine(tp=2.0))
  eager = cm.estimate(ppo_job, plan, cluster_2x8)
  jitted = jax.jit(cm.estimate)(ppo_job, plan, cluster_2x8)
  assert_tree_allclose(jitted, eager, rtol=1e-5, atol=1e-6)
  assert jitted.stage_names == eager.stage_names
  assert float(eager.step_time_s) > 0
  # float32 in, float32 out (the float64 tests above check float64 through).
  for leaf in jax.tree.leaves(jitted):
    assert leaf.dtype in (jnp.float32, jnp.bool_), leaf.dtype


def test_vmap_over_plans_equals_a_loop(grpo_job, cluster_2x8):
  plans = [
      _split_plan(grpo_job, cluster_2x8, gen_gpus=8, engine_tp=2.0, train_tp=2.0),
      _split_plan(grpo_job, cluster_2x8, gen_gpus=4, engine_tp=1.0, train_tp=4.0,
                  micro_batch=4.0),
      _split_plan(grpo_job, cluster_2x8, gen_gpus=12, engine_tp=4.0, train_tp=1.0,
                  zero_stage=2.0, recompute=1.0),
  ]
  batch = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float32) for x in xs]), *plans)
  batched = jax.jit(jax.vmap(lambda p: cm.estimate(grpo_job, p, cluster_2x8)))(batch)
  assert batched.step_time_s.shape == (3,)
  for i, p in enumerate(plans):
    single = cm.estimate(grpo_job, p, cluster_2x8)
    assert_tree_allclose(jax.tree.map(lambda x, i=i: x[i], batched), single, rtol=1e-5,
                         atol=1e-6)
  assert len({round(float(t), 6) for t in batched.step_time_s}) == 3
