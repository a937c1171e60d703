"""The relaxed objective is finite, with finite gradients, over random relaxed
plans (100,000 of them, in chunks), and its gradient matches finite
differences where the model is smooth."""

import numpy as np
import pytest

import costmodel as cm
from search._src import relax
from search._src import space as space_lib

CHUNK = 12_500
TOTAL = 100_000


@pytest.fixture(scope="module")
def fs():
  job = cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                 samples_per_prompt=4.0, prompt_len=512.0,
                 response=cm.ResponseLength.from_mean_max(1000.0, 4096.0),
                 reward_model=cm.models.get("qwen2.5-1.5b"))
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=4)
  return space_lib.build("split3", job, cluster)


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
