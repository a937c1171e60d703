"""The lower bound on a family's step time (``search.lower_bound``).

Checked four ways: the leaf formula it minimises is at most every feasible
plan's step time (plan by plan, by brute force over every valid plan); the
bound never exceeds the exhaustive optimum (every family of the search tests'
problem, and ``split3`` of a small PPO job); it equals that formula minimised
by brute force (so the per-pool-combination decomposition loses nothing); and
it refuses a family whose leaves' times depend on each other.

The brute force scores every valid plan with the bound's own compiled program
(the same chunk of rows), and the exhaustive optimum is the least feasible
step time of those scores: one enumeration serves both checks.
"""

import numpy as np
import pytest

import costmodel as cm
import search
from search._src import cut_tree
from search._src import evaluate
from search._src import kept_spaces

FAMILIES = ("colocated", "split", "split_async", "split_async_partial")


@pytest.fixture(scope="module")
def ppo_case(h100):
  """PPO with a critic and a reward model on 8 H100, a space small enough to
  enumerate its ``split3`` family."""
  m = cm.models.get("qwen2.5-1.5b")
  job = cm.RLJob("ppo", m, prompts_per_step=32.0, samples_per_prompt=4.0, reward_model=m)
  cluster = cm.Cluster(h100, gpus_per_node=8, nodes=1)
  space = search.SpaceOptions(max_tp=2, max_pp=1, micro_batches=(2, 8), zero_stages=(1,),
                              recompute=(0, 2), offload=(0,), engine_max_tp=2,
                              engine_max_pp=1, memory_fractions=(0.5, 0.9),
                              max_seqs=(64, 256), vpp=(1,))
  return job, cluster, space


def _brute_force(job, cluster, family, space) -> tuple[float, float, int]:
  """The bound's leaf formula evaluated on every valid plan of ``family``, minimised
  (a leaf alone on its pool counts only where it fits), the exhaustive optimum
  (the least feasible step time) and the number of valid plans; asserts on the
  way that the formula is at most each feasible plan's step time, and that a
  feasible plan's lone leaves fit (the premises of the bound, plan by plan)."""
  _, fs, blocks = kept_spaces.valid_space(job, cluster, family, space, "any")
  run = cut_tree.CutFamily(fs, cm.Efficiency(), evaluate.DEFAULT_CHUNK, 1, blocks=blocks)
  mode = fs.structure.placement.mode
  overlap = mode.staleness > 0 or mode.require_batches is not None  # pipelined, by hand
  best = optimum = np.inf
  plans = 0
  for rows, _ in blocks.chunks(65536):
    scores, names, dur, ex = run.ev.stage_scores(rows)
    on_pool = {p: np.zeros(len(rows)) for p in run.pool_names}
    fits = np.ones(len(rows), bool)
    pools = [run.pool_of_leaf(name) for name, *_rest in run.leaves]
    for k, pool in enumerate(pools):
      cost, ok, _ = run.leaf_cost(k, names, dur, ex)
      on_pool[pool] += cost
      if pools.count(pool) == 1:
        fits &= ok
    rest = [on_pool[p] for p in run.pool_names if p != run.rollout]
    inner = np.max(rest, 0) if rest else 0.0
    total = (np.maximum(on_pool[run.rollout], inner) if overlap
             else on_pool[run.rollout] + inner)
    feasible = np.asarray(scores.feasible, bool)
    assert feasible.any() and fits[feasible].all()
    step = np.asarray(scores.step_time_s)[feasible]
    assert (total[feasible] <= step * (1 + 1e-5)).all(), np.max(total[feasible] / step)
    total = np.where(fits, total, np.inf)
    best = min(best, float(total.min()))
    optimum = min(optimum, float(step.min()))
    plans += len(rows)
  return best, optimum, plans


@pytest.mark.parametrize("family", FAMILIES)
def test_bound_is_below_the_optimum_and_equals_the_brute_force_minimum(
    family, search_job, cluster_2x8, compact_space):
  b = search.lower_bound(search_job, cluster_2x8, family, space=compact_space)
  assert isinstance(b, search.FamilyBound) and b.family == family
  least, opt, plans = _brute_force(search_job, cluster_2x8, family, compact_space)
  assert plans == search.space_size(search_job, cluster_2x8, family, compact_space)
  assert 0.0 < b.bound_s <= opt * (1 + 1e-6)
  # A bound far below every plan would be true and useless: these families'
  # weight sync, switch and reward stages are a small share of the step.
  assert b.bound_s >= 0.5 * opt
  # Colocated leaves share one pool's memory; in the split families the engine
  # and the actor (with the reference it lends its layout to) each hold a pool alone.
  assert b.fits_pools == (() if family == "colocated" else ("gen", "train"))
  assert b.bound_s == pytest.approx(least, rel=1e-5)
  assert sum(b.pools.values()) <= cluster_2x8.n_gpus and b.rows > 0 and b.wall_time_s > 0


def test_split3_bound_two_training_pools(ppo_case):
  job, cluster, space = ppo_case
  b = search.lower_bound(job, cluster, "split3", space=space)
  assert set(b.pools) == {"gen", "actor", "critic"}
  assert b.fits_pools == ("actor", "gen")  # the critic and the reward model share a pool
  least, opt, _ = _brute_force(job, cluster, "split3", space)
  assert 0.5 * opt <= b.bound_s <= opt * (1 + 1e-6)
  assert b.bound_s == pytest.approx(least, rel=1e-5)


def test_refuses_leaves_that_depend_on_each_other(search_job, cluster_2x8, compact_space,
                                                  monkeypatch):
  real = cut_tree.CutFamily.leaf_cost

  def coupled(self, k, names, dur, ex):
    # The leaf's time grows with the engine's stage time: as if it waited on it.
    cost, ok, excess = real(self, k, names, dur, ex)
    return cost + 1e-3 * dur[:, list(names).index("generate")], ok, excess

  monkeypatch.setattr(cut_tree.CutFamily, "leaf_cost", coupled)
  with pytest.raises(ValueError, match="family='split'.*changes by"):
    search.lower_bound(search_job, cluster_2x8, "split", space=compact_space)


@pytest.mark.parametrize("family, match", [("nope", "family='nope'"),
                                           ("split3", "family='split3'")])
def test_bad_family_names_the_field(family, match, search_job, cluster_2x8, compact_space):
  with pytest.raises(ValueError, match=match):
    search.lower_bound(search_job, cluster_2x8, family, space=compact_space)


def test_refuses_a_nan_leaf_time(search_job, cluster_2x8, compact_space, monkeypatch):
  real = cut_tree.CutFamily.leaf_cost

  def nan_first(self, k, names, dur, ex):
    cost, ok, excess = real(self, k, names, dur, ex)
    return np.where(np.arange(len(cost)) == 0, np.nan, cost), ok, excess

  monkeypatch.setattr(cut_tree.CutFamily, "leaf_cost", nan_first)
  with pytest.raises(ValueError, match="family='split'.*NaN"):
    search.lower_bound(search_job, cluster_2x8, "split", space=compact_space)


def test_refuses_fused_inference():
  # No family of the search fuses inference; a family space that did is refused by name.
  from types import SimpleNamespace
  from search._src import bound
  fs = SimpleNamespace(family="split", structure=SimpleNamespace(
      placement=SimpleNamespace(mode=cm.Mode(fuse_inference=True))))
  with pytest.raises(ValueError, match="family='split' fuses inference"):
    bound.check_mode(fs)
  bound.check_mode(SimpleNamespace(family="split", structure=SimpleNamespace(
      placement=SimpleNamespace(mode=cm.Mode()))))  # the search's modes pass


@pytest.mark.parametrize("mode, pipelined", [
    (dict(), False), (dict(staleness=1), True), (dict(require_batches=2), True),
    (dict(staleness=2, partial_rollout=True), True), (dict(fuse_training=True), False)])
def test_mode_pipelined(mode, pipelined):
  assert cm.Mode(**mode).pipelined is pipelined
