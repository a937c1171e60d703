"""Framework spaces hold no dead variables, and the baselines search the same space.

A variable whose options all give the same plan once the framework's forced settings are
applied (``Exporter.adapt``, see tests/test_search_frameworks_forced.py) keeps one option;
random search, annealing, enumeration and the cut DP take ``framework=`` and search the
space :func:`search.optimize` searches for it. PPO on Qwen2.5-1.5B (actor, critic,
reference) and the search tests' GRPO job, 16 H100, the compact space.
"""

import dataclasses

import numpy as np
import pytest

import costmodel as cm
import export
import search
from search._src import frameworks as fw_lib
from search._src import space as space_lib
from search._src import valid_space

_FRAMEWORKS = fw_lib.NAMES[1:]

# What each exporter's ``as_run`` forces over a search variable (export/_src/*.py), and the
# option it leaves effective: veRL keeps an FSDP reference's parameters on the host
# (offload 1); slime keeps the reference's weights in pinned host memory (swap 1, offload
# 0) and gives the critic the actor's offload (the critic's own column is never read: its
# first option).
_DEAD = {"verl": {"reference.offload": 1.0},
         "slime": {"reference.offload": 0.0, "critic.offload": 0.0}}


def _unfixed(fw: fw_lib.Framework, fam, job, cluster, space) -> space_lib.FamilySpace:
  """``fam`` in ``fw``'s space with every option kept (no forced settings, so none dead),
  its plans still as ``fw`` runs them."""
  fs = space_lib.build(fam, job, cluster, fw.space_options(space), nodes=fw.nodes,
                       ties=fw.ties, rule_sets=fw.rule_sets, runs_as="any")
  return dataclasses.replace(fs, structure=dataclasses.replace(fs.structure, runs_as=fw.name))


def _rows(fs: space_lib.FamilySpace, n: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return np.asarray([[rng.choice(v.options) for v in fs.vars] for _ in range(n)], np.float64)


def _plan(fs, row):
  try:
    return fs.to_plan(row)
  except ValueError:  # e.g. vpp > 1 with pp = 1: no plan
    return None


@pytest.mark.parametrize("name", _FRAMEWORKS)
def test_dead_variables_keep_their_effective_option(name, ppo_job, cluster_2x8, compact_space):
  fw = fw_lib.get(name)
  for fam in fw_lib.families_for(ppo_job, name, max_staleness=1, partial_rollout=True):
    fs = fw.build(fam, ppo_job, cluster_2x8, compact_space)
    full = _unfixed(fw, fam, ppo_job, cluster_2x8, compact_space)
    assert fs.names == full.names
    fixed = {a.name: float(a.options[0]) for a, b in zip(fs.vars, full.vars, strict=True)
             if len(a.options) < len(b.options)}
    assert fixed == _DEAD.get(name, {}), fam
    # The space shrinks by the dead options: two offload settings each.
    assert full.size == fs.size * 2 ** len(fixed)
    # Fixing loses nothing: every option of a dead variable gives the fixed option's plan.
    for row in _rows(fs, 6, seed=21):
      ref = _plan(fs, row)
      for var_name in fixed:
        j = fs.index(var_name)
        for o in full.var(var_name).options:
          v = row.copy()
          v[j] = o
          assert _plan(full, v) == ref, (fam, var_name, o)


@pytest.mark.parametrize("name", fw_lib.NAMES)
def test_every_remaining_variable_changes_the_plan(name, ppo_job, search_job, cluster_2x8,
                                                   compact_space):
  fw = fw_lib.get(name)
  for job in (ppo_job, search_job):
    for fam in fw_lib.families_for(job, name, max_staleness=1, partial_rollout=True):
      fs = fw.build(fam, job, cluster_2x8, compact_space)
      rows = _rows(fs, 12, seed=5)
      for j, var in enumerate(fs.vars):
        if len(var.options) < 2:
          continue
        changes = False
        for row in rows:
          plans = []
          for o in var.options:
            v = row.copy()
            v[j] = o
            plans.append(_plan(fs, v))
          plans = [p for p in plans if p is not None]
          if any(p != plans[0] for p in plans[1:]):
            changes = True
            break
        assert changes, (name, job.algorithm, fam, var.name)


def test_space_size_is_the_frameworks(ppo_job, cluster_2x8, compact_space):
  # The valid plans of veRL's split family: its own rules and nodes, the reference's
  # offload fixed (two settings fewer), what optimize searches.
  verl = search.space_size(ppo_job, cluster_2x8, "split", compact_space, framework="verl")
  fw = fw_lib.get("verl")
  built = valid_space.Blocks(fw.build("split", ppo_job, cluster_2x8, compact_space)).size
  full = valid_space.Blocks(_unfixed(fw, "split", ppo_job, cluster_2x8, compact_space)).size
  assert verl == built and full == 2 * verl
  assert search.space_size(ppo_job, cluster_2x8, "split", compact_space) > verl


def test_baselines_search_the_frameworks_space(search_job, cluster_2x8, compact_space):
  kw = dict(space=compact_space, framework="verl")
  runs = [
      search.enumerate_plans(search_job, cluster_2x8, "split", chunk_size=4096, **kw),
      search.random_search(search_job, cluster_2x8, "split", budget_s=60.0, seed=0, batch=2048,
                           max_evaluations=4096, **kw),
      search.simulated_annealing(search_job, cluster_2x8, "split", budget_s=60.0, seed=0,
                                 chains=512, max_evaluations=4096, **kw),
      search.cut_dp(search_job, cluster_2x8, families=("split",), **kw),
  ]
  e = export.get("verl")
  for res in runs:
    assert res.framework == "verl" and res.best_plan is not None, res.method
    assert "verl" in res.accepted_by, res.method
    assert res.best_step_time_s >= runs[0].best_step_time_s * (1 - 1e-6), res.method
    for plan, est in res.top:
      assert fw_lib.export_error("verl", plan, search_job, cluster_2x8) is None, res.method
      assert e.adapt(plan) == plan  # the plan as veRL runs it
      assert plan.role("reference").infer_layout.offload == 1.0
      assert float(est.step_time_s) == pytest.approx(
          float(cm.estimate(search_job, plan, cluster_2x8).step_time_s), rel=1e-5)
  # The same space as optimize's: enumeration's best is no slower than the search's.
  best = search.optimize(search_job, cluster_2x8, families=["split"], starts=4, steps=10,
                         seed=0, space=compact_space, framework="verl", top_k=1)
  assert best.best_step_time_s >= runs[0].best_step_time_s * (1 - 1e-6)
  assert runs[0].space_size == search.space_size(search_job, cluster_2x8, "split", **kw)


def test_baselines_refuse_a_bad_framework(search_job, cluster_2x8, compact_space):
  kw = dict(space=compact_space)
  calls = (
      lambda **k: search.enumerate_plans(search_job, cluster_2x8, "split", **kw, **k),
      lambda **k: search.random_search(search_job, cluster_2x8, "split", 1.0, **kw, **k),
      lambda **k: search.simulated_annealing(search_job, cluster_2x8, "split", 1.0, **kw, **k),
      lambda **k: search.space_size(search_job, cluster_2x8, "split", **kw, **k),
      lambda **k: search.cut_dp(search_job, cluster_2x8, **kw, **k),
  )
  for call in calls:
    with pytest.raises(ValueError, match=r"framework='vrl' is not one of"):
      call(framework="vrl")
  # AReaL runs its rollouts on a pool of their own: no colocated plan.
  with pytest.raises(ValueError, match=r"family='colocated' is not a placement framework='areal'"):
    search.random_search(search_job, cluster_2x8, "colocated", 1.0, space=compact_space,
                         framework="areal")
