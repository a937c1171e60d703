"""Each stage costed once per distinct input of a batch (cmi.estimate_rows):
row by row the estimates of estimate_shared, distinct inputs found exactly (hash
collisions included), sweeps that keep a stage's inputs share its cost, and bad
input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import score_checks

from costmodel import internal as cmi
from costmodel._src.rows import estimate as factored
from costmodel._src.rows import grouping
from search._src import frameworks as fw_lib
from search._src import shared as shared_lib

FAMILIES = ("colocated", "split")


@pytest.fixture(scope="module")
def shared(search_job, cluster_2x8, compact_space):
  fw = fw_lib.get("any")
  return shared_lib.SharedSpace(
      [fw.build(f, search_job, cluster_2x8, compact_space, "bf16") for f in FAMILIES])


def _plans_of(shared):
  def plans_of(v):
    return tuple(fs.structure.to_plan(v[cols]) for fs, cols in
                 zip(shared.spaces, shared.columns, strict=True)), shared.family_of(v)
  return plans_of


def _batch(shared, seed=0, n=24):
  """Sampled rows of both families, copies of them, a sweep of the actor's
  micro-batch (a colocated plan) and one of the rollout pool's size (a split
  plan: same layouts, other stage inputs)."""
  rng = np.random.default_rng(seed)
  rows = []
  for k, fs in enumerate(shared.spaces):
    own = np.stack([[rng.choice(v.options) for v in fs.vars] for _ in range(n)])
    rows.append(shared.widen(k, own.astype(np.float32)))
  rows = np.concatenate(rows)
  sweep = np.repeat(rows[:1], 12, 0)
  col = shared.names.index("actor.mb_train")
  sweep[:, col] = rng.choice(shared.vars[col].options, 12)
  pools = np.repeat(rows[n:n + 1], 12, 0)
  pools[:, shared.names.index("pool.gen")] = np.arange(1.0, 13.0)
  return np.concatenate([rows, rows[::3], pools, sweep]).astype(np.float32)


@pytest.mark.parametrize("block", [5, 64])
def test_estimate_rows_is_estimate_shared_row_by_row(shared, block):
  job, cluster = shared.job, shared.cluster
  plans_of = _plans_of(shared)
  rows = jnp.asarray(_batch(shared))
  got = jax.jit(lambda r: cmi.estimate_rows(job, plans_of, r, cluster, block=block))(rows)
  want = jax.jit(jax.vmap(lambda r: cmi.estimate_shared(job, *plans_of(r), cluster)))(rows)
  fam = np.asarray(rows[:, -1]).astype(int)
  finite = 0
  for k in range(len(shared.spaces)):
    mine = fam == k
    for a, b in zip(jax.tree.leaves(got[k]), jax.tree.leaves(want[k]), strict=True):
      a, b = np.asarray(a)[mine], np.asarray(b)[mine]
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-30)
    finite += int(np.isfinite(np.asarray(want[k].step_time_s)[mine]).sum())
  assert finite > 30  # the comparison reaches real plans


def test_distinct_finds_each_distinct_row_once():
  rng = np.random.default_rng(1)
  keys = rng.integers(0, 3, size=(500, 4)).astype(np.uint32)
  firsts, inverse, count = map(np.asarray, jax.jit(grouping.distinct)(jnp.asarray(keys)))
  assert int(count) == len(np.unique(keys, axis=0))
  reps = keys[firsts[:int(count)]]
  assert len(np.unique(reps, axis=0)) == int(count)  # no key listed twice
  np.testing.assert_array_equal(keys[firsts[inverse]], keys)  # every row gets its own key


def test_distinct_stays_exact_when_every_hash_collides(monkeypatch):
  # With one hash for every key, every row lands in one slot: each round groups
  # the lowest pending row's key, the rest stand for themselves (more work), but
  # no row gets another key's cost.
  monkeypatch.setattr(grouping, "_MULTIPLIERS", np.zeros(64, np.uint32))
  keys = np.asarray([[1, 2], [3, 4], [1, 2], [1, 2], [3, 4]], np.uint32)
  firsts, inverse, count = map(np.asarray, grouping.distinct(jnp.asarray(keys)))
  np.testing.assert_array_equal(keys[firsts[inverse]], keys)
  assert 2 <= int(count) <= 5


def test_distinct_of_no_rows_is_empty():
  firsts, inverse, count = grouping.distinct(jnp.zeros((0, 3), jnp.uint32))
  assert firsts.shape == inverse.shape == (0,) and int(count) == 0


def test_a_sweep_of_the_actors_training_keeps_generation_and_scoring_shared(shared):
  job, cluster = shared.job, shared.cluster
  rows = _batch(shared)[-12:]  # the sweep of actor.mb_train over one plan
  counts = {n: int(c) for n, c in jax.jit(lambda r: factored.distinct_inputs(
      job, _plans_of(shared), r, cluster))(jnp.asarray(rows)).items()}
  swept = len(np.unique(rows[:, shared.names.index("actor.mb_train")]))
  assert swept > 2
  assert counts["generate"] == 1 and counts["reference"] == 1
  assert counts["actor_update"] == swept


def test_a_sweep_of_the_rollout_pool_costs_generation_once_per_size(shared):
  job, cluster = shared.job, shared.cluster
  rows = _batch(shared)[-24:-12]  # a split plan, the rollout pool 1..12 GPUs
  counts = {n: int(c) for n, c in jax.jit(lambda r: factored.distinct_inputs(
      job, _plans_of(shared), r, cluster))(jnp.asarray(rows)).items()}
  assert counts["generate"] == 12
  assert counts["actor_update"] == 1  # the training pool and layout stay


def test_one_trace_serves_every_batch_of_a_shape(shared):
  job, cluster = shared.job, shared.cluster
  traced = []

  def plans_of(v):
    traced.append(1)
    return _plans_of(shared)(v)

  f = jax.jit(lambda r: cmi.estimate_rows(job, plans_of, r, cluster)[0].step_time_s)
  rows = _batch(shared)
  f(jnp.asarray(rows))
  n = len(traced)
  f(jnp.asarray(rows[::-1].copy()))
  f(jnp.asarray(np.repeat(rows[:1], len(rows), 0)))
  assert len(traced) == n


@pytest.mark.parametrize("block", [0, -3, 2.0, True])
def test_bad_block(shared, block):
  with pytest.raises(ValueError, match=r"block=.* must be a positive integer"):
    cmi.estimate_rows(shared.job, _plans_of(shared), jnp.asarray(_batch(shared)),
                     shared.cluster, block=block)


def test_lean_scorers_agree_with_and_without_factoring(shared):
  from search._src import evaluate  # pylint: disable=g-import-not-at-top
  fs = shared.spaces[1]
  rng = np.random.default_rng(3)
  rows = np.stack([[rng.choice(v.options) for v in fs.vars] for _ in range(60)])
  rows = np.concatenate([rows, np.repeat(rows[:2], 10, 0)])
  a = evaluate.Evaluator(fs, chunk=32).scores(rows)
  b = evaluate.Evaluator(fs, chunk=32, factored=False).scores(rows)
  score_checks.assert_same_scores(a, b, min_finite=21)
