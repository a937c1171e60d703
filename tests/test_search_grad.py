"""The relaxed objective is finite, with finite gradients, over random relaxed
plans (100,000 of them, in chunks), and its gradient matches finite
differences where the model is smooth."""

import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from search._src import compile_cache
from search._src import differences
from search._src import relax
from search._src import relaxed_objective
from search._src import space as space_lib

# Every gradient of this module is taken on CHUNK rows (padded where fewer are
# checked): one compiled shape.
CHUNK = 1_000
TOTAL = 100_000


@pytest.fixture(scope="module")
def fs():
  job = cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0),
                 reward_model=cm.models.get("qwen2.5-1.5b"))
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=4)
  return space_lib.build("split3", job, cluster)


def _objective_and_grad(fs, eff, x, tau, weight):
  """:func:`relax.objective_and_grad` of ``x``'s rows, taken on CHUNK rows."""
  n = len(x)
  pad = lambda a: np.concatenate([a, np.repeat(a[-1:], CHUNK - n, 0)], 0)
  return tuple(a[:n] for a in relax.objective_and_grad(fs, eff, pad(x), pad(tau), weight))


def _random_relaxed(fs, rng, n):
  """Starts spread over the whole box, and beyond it for the pool logits."""
  x, lo, hi = fs.init_relaxed(rng, n)
  pool = [fs.index(f"pool.{p}") for p in fs.structure.pools]
  x[:, pool] = rng.uniform(-8.0, 8.0, size=(n, len(pool)))
  tau = np.exp(rng.uniform(np.log(0.02), np.log(0.3), size=n))
  return x, lo, hi, tau


def test_objective_and_gradient_finite_on_100k_random_plans(fs):
  rng = np.random.default_rng(0)
  eff = cm.Efficiency()
  n_feasible = 0
  for _ in range(TOTAL // CHUNK):
    x, lo, hi, tau = _random_relaxed(fs, rng, CHUNK)
    obj, step, penalty, grad = relax.objective_and_grad(fs, eff, x, tau, weight=10.0)
    assert np.all(np.isfinite(obj)), "non-finite objective"
    assert np.all(np.isfinite(step)) and np.all(step > 0)
    assert np.all(np.isfinite(penalty)) and np.all(penalty >= 0)
    assert np.all(np.isfinite(grad)), "non-finite gradient"
    n_feasible += int(np.sum(penalty == 0))
    # Only trainable variables and the fixed categoricals exist; a non-zero
    # gradient reaches at least the engine and the pools somewhere.
    assert np.any(grad[:, fs.index("engine.tp")] != 0)
    assert np.any(grad[:, fs.index("pool.gen")] != 0)
  # The sample covers both sides of the constraints.
  assert 0 < n_feasible < TOTAL


def test_gradient_matches_finite_differences(fs):
  rng = np.random.default_rng(3)
  # A full chunk keeps the compiled shapes of the test above; 64 rows are checked.
  x, _, _, _ = _random_relaxed(fs, rng, CHUNK)
  x[64:] = x[0]
  tau = np.full(CHUNK, 0.1)
  eff = cm.Efficiency()
  obj, _, _, grad = relax.objective_and_grad(fs, eff, x, tau, weight=10.0)
  assert np.all(np.isfinite(obj))
  h = 2e-3
  for name in ("engine.tp", "engine.max_seqs", "actor.tp", "actor.mb_train", "pool.gen"):
    j = fs.index(name)
    xp, xm = x.copy(), x.copy()
    xp[:, j] += h
    xm[:, j] -= h
    fp = relax.objective_and_grad(fs, eff, xp, tau, weight=10.0)[0]
    fm = relax.objective_and_grad(fs, eff, xm, tau, weight=10.0)[0]
    fd = ((fp - fm) / (2 * h))[:64]
    assert np.any(np.abs(fd) > 1e-2), name  # the variable matters somewhere
    # Central differences of a float32 model; a kink of a penalty's relu may
    # fall inside [x - h, x + h] for a few plans.
    close = np.isclose(grad[:64, j], fd, rtol=0.02, atol=5e-3)
    assert close.mean() >= 0.8, (name, grad[:64, j], fd)


# Median and smallest cosine to the reverse-mode gradient: central differences
# are second-order accurate; forward differences (the default) first-order, so
# the objective's curvature over the step h tilts them (median 0.95, least 0.69
# at tau = 0.3 on these points): still descent directions.
_AGREEMENT = {True: (0.9999, 0.8), False: (0.93, 0.6)}


@pytest.mark.parametrize("central", [True, False])
def test_finite_differences_of_the_search_match_the_reverse_gradient(fs, central):
  """The search's loop takes forward (or central) differences of the relaxed
  objective (``RelaxConfig.gradient``); on smooth points they agree with
  reverse-mode autodiff in every trainable column, and are zero elsewhere."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(5)
  x, _, _, _ = _random_relaxed(fs, rng, 32)
  eff = cm.Efficiency()
  cols = relaxed_objective.trainable(fs)
  assert cols and fs.index("engine.tp") in cols
  assert all(fs.vars[j].kind != space_lib.CAT and len(fs.vars[j].options) > 1 for j in cols)
  h = relax.RelaxConfig().fd_step
  # One program for both temperatures, compiled as the search's loop is.
  program = jax.jit(
      lambda v, tau: differences.finite_differences(
          lambda row: relax._objective((fs.structure, fs), fs.job, fs.cluster, eff, row, tau,
                                       10.0), v, cols, h, central=central),
      compiler_options=compile_cache.FAST_COMPILE)
  for tau in (0.3, 0.02):
    obj, step, penalty, grad = _objective_and_grad(fs, eff, x, np.full(32, tau), 10.0)
    loss, (fstep, fpen), fd = program(jnp.asarray(x, jnp.float32), jnp.float32(tau))
    np.testing.assert_allclose(np.asarray(loss), obj, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fstep), step, rtol=1e-5)
    fd = np.asarray(fd)
    others = [j for j in range(fd.shape[1]) if j not in cols]
    assert np.all(fd[:, others] == 0.0)
    a, b = fd[:, cols], grad[:, cols]
    cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    # Where a relu kink of a penalty falls inside [x - h, x + h] (these points lie
    # beyond the box, across the constraints) the difference averages the two
    # sides: still a descent direction.
    median, least = _AGREEMENT[central]
    assert np.median(cos) > median and np.all(cos > least), (tau, np.sort(cos)[:8])


def test_both_gradients_descend_and_bad_settings_are_refused(fs):
  rng = np.random.default_rng(2)
  x0, lo, hi = fs.init_relaxed(rng, 8)
  eff = cm.Efficiency()
  out = {g: relax.run(fs, fs.job, fs.cluster, eff, x0, lo, hi,
                      relax.RelaxConfig(steps=40, gradient=g)) for g in relax.GRADIENTS}
  first = _objective_and_grad(fs, eff, x0, np.full(8, 0.3), weight=1.0)[1]
  for g, o in out.items():
    assert o.history_s.shape == (40,)
    # The best nearly feasible relaxed step time improves on the starts' (at the first tau).
    assert np.nanmin(o.step_time_s[o.penalty <= 1e-3]) < np.min(first), g
  # The two gradients lead the starts to about the same relaxed optimum.
  best = {g: float(np.min(o.history_s)) for g, o in out.items()}
  assert best["central"] == pytest.approx(best["reverse"], rel=0.05)
  assert best["forward"] == pytest.approx(best["reverse"], rel=0.05)
  with pytest.raises(ValueError, match="gradient='backward' is not one of"):
    relax.run(fs, fs.job, fs.cluster, eff, x0, lo, hi, relax.RelaxConfig(gradient="backward"))
  with pytest.raises(ValueError, match="fd_step=0.0 must be > 0"):
    relax.run(fs, fs.job, fs.cluster, eff, x0, lo, hi, relax.RelaxConfig(fd_step=0.0))


def test_a_short_loop_compiles_its_step_at_level_0_with_the_same_numbers(fs):
  cfg = relax.RelaxConfig(steps=10)
  assert differences.points_per_start(5) == 6
  assert differences.points_per_start(5, central=True) == 11
  points = lambda rows: rows * (len(relaxed_objective.trainable(fs)) + 1) * cfg.steps  # forward
  rows = relax.SMALL_LOOP_POINTS // points(1)
  small, small_opts = relax.step_program(fs, cfg, rows)
  large, large_opts = relax.step_program(fs, cfg, rows + 1)
  assert points(rows) <= relax.SMALL_LOOP_POINTS < points(rows + 1)
  assert small_opts == compile_cache.FAST_COMPILE and large_opts == compile_cache.FORWARD
  # The two programs are one step function: the same new points and step times.
  x0, lo, hi = fs.init_relaxed(np.random.default_rng(3), 8)
  state = relax.init(cfg, jnp.asarray(x0, jnp.float32))
  inputs = relax.RelaxInputs(lo=jnp.asarray(lo, jnp.float32), hi=jnp.asarray(hi, jnp.float32))
  args = (relax.Static(fs), cfg, fs.job, fs.cluster, cm.Efficiency(), inputs, state)
  a, b = small(*args), large(*args)
  for i in (3, 4, 5):  # step times, penalties, best: the same to float rounding
    np.testing.assert_allclose(a[i], b[i], rtol=1e-5, atol=1e-7)
  # Adam's first step is lr * sign(gradient): where a gradient is ~0 (a flat
  # direction) rounding may flip it, elsewhere the new points are equal.
  same = np.isclose(a[0].x, b[0].x, rtol=1e-4, atol=1e-5)
  assert same.mean() > 0.95, same.mean()
