"""Expert-tensor parallelism (ETP) as a search variable of a trained role of an MoE job:
where the space offers it, what each option makes of a plan, the frameworks that keep
it at one option, and the searched best plan exported and imported again."""

import dataclasses

import numpy as np
import pytest

import costmodel as cm
import export
import search
from search._src import frameworks as fw_lib
from search._src import space as space_lib
from search._src import valid_space


def _job(model, prompts=64.0):
  return cm.RLJob("grpo", cm.models.get(model), prompts_per_step=prompts, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


def test_moe_spaces_offer_etp_and_dense_ones_do_not(cluster_2x8):
  moe = space_lib.build("split", _job("qwen3-30b-a3b"), cluster_2x8)
  np.testing.assert_array_equal(moe.var("actor.etp").options, [0.0, 1.0])
  assert "reference.etp" not in moe.names  # the reference runs the actor's layout
  dense = space_lib.build("split", _job("qwen2.5-7b"), cluster_2x8)
  assert not any(n.endswith(".etp") for n in dense.names)
  # Without expert or tensor parallelism there is nothing to split the experts over.
  no_ep = space_lib.build("split", _job("qwen3-30b-a3b"), cluster_2x8,
                          search.SpaceOptions(max_ep=1))
  no_tp = space_lib.build("split", _job("qwen3-30b-a3b"), cluster_2x8,
                          search.SpaceOptions(max_tp=1))
  assert "actor.etp" not in no_ep.names and "actor.etp" not in no_tp.names
  # One option: ETP equal to TP wherever there is EP.
  only = space_lib.build("split", _job("qwen3-30b-a3b"), cluster_2x8,
                         search.SpaceOptions(etp=(1,)))
  np.testing.assert_array_equal(only.var("actor.etp").options, [1.0])
  with pytest.raises(ValueError, match=r"etp=\(2,\) must be a non-empty subset of \(0, 1\)"):
    search.SpaceOptions(etp=(2,))


def test_each_option_sets_the_layouts_expert_tp(cluster_2x8):
  fs = space_lib.build("colocated", _job("qwen3-30b-a3b"), cluster_2x8,
                       search.SpaceOptions.compact())
  rows = valid_space.Blocks(fs).sample(np.random.default_rng(0), 400)
  tp, ep = rows[:, fs.index("actor.tp")], rows[:, fs.index("actor.ep")]
  rows = rows[(tp > 1) & (ep > 1)]
  assert len(rows)
  row = rows[0].copy()
  row[fs.index("actor.etp")] = 1.0
  plan = fs.to_plan(row)
  tp = float(plan.role("actor").train.tp)
  for r in ("actor", "reference"):
    for phase in ("train", "infer"):
      lay = getattr(plan.role(r), phase)
      if lay is not None:
        assert float(lay.etp) == tp, (r, phase)
  row[fs.index("actor.etp")] = 0.0
  assert float(fs.to_plan(row).role("actor").train.etp) == 1.0
  # Without EP the option changes nothing (experts follow TP): the plan keeps ETP 1.
  row[fs.index("actor.ep")] = 1.0
  row[fs.index("actor.etp")] = 1.0
  assert float(fs.to_plan(row).role("actor").train.etp) == 1.0
  # The traced plan agrees with the concrete one.
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  row[fs.index("actor.ep")] = 2.0
  traced = fs.structure.to_plan(jnp.asarray(row))
  assert float(traced.role("actor").train.etp) == float(fs.to_plan(row).role("actor").train.etp)


@pytest.mark.parametrize("name,has", [("any", True), ("nemo_rl", True), ("slime", True),
                                      ("areal", False), ("openrlhf", False), ("verl", False)])
def test_frameworks_without_etp_keep_one_option(name, has, cluster_2x8):
  job = _job("qwen3-30b-a3b")
  fw = fw_lib.get(name)
  fs = fw.build(fw_lib.families_for(job, name)[0], job, cluster_2x8)
  assert ("actor.etp" in fs.names) == has
  if not has:  # every plan keeps each expert whole
    rows = valid_space.Blocks(fs).sample(np.random.default_rng(1), 50)
    assert all(float(fs.to_plan(r).role("actor").train.etp) == 1.0 for r in rows)


@pytest.mark.parametrize("name", ("slime", "nemo_rl"))
def test_expert_tp_plans_of_the_space_export(name, cluster_2x8):
  job = _job("qwen3-30b-a3b")
  fw = fw_lib.get(name)
  seen = 0
  for fam in fw_lib.families_for(job, name):
    fs = fw.build(fam, job, cluster_2x8, search.SpaceOptions.compact())
    rows = valid_space.Blocks(fs).sample(np.random.default_rng(2), 200)
    rows = rows[(rows[:, fs.index("actor.etp")] == 1.0) & (rows[:, fs.index("actor.ep")] > 1)
                & (rows[:, fs.index("actor.tp")] > 1)]
    for row in rows[:5]:
      plan = fs.to_plan(row)
      assert float(plan.role("actor").train.etp) > 1
      assert fw_lib.export_error(name, plan, job, cluster_2x8) is None, fam
      seen += 1
  assert seen >= 5


def test_searched_best_plan_with_expert_tp_exports_and_imports_with_its_step_time(cluster_2x8):
  # Qwen3-30B-A3B on 16 H100 with EP and TP capped at 2, no pipeline and no offload: the
  # expert weights fit only split four ways, which ETP = TP gives.
  job = _job("qwen3-30b-a3b")
  space = dataclasses.replace(search.SpaceOptions.compact(), max_tp=2, max_ep=2, max_pp=1,
                              offload=(0,))
  res = search.optimize(job, cluster_2x8, framework="slime", starts=8, steps=30, seed=0,
                        space=space, top_k=3)
  assert res.feasible
  plan = res.best_plan
  actor = plan.role("actor").train
  assert float(actor.ep) == 2.0 and float(actor.etp) == float(actor.tp) == 2.0
  # The same plan with each expert whole on its rank holds more expert weights per GPU.
  whole = plan.replace(roles=tuple(
      dataclasses.replace(r, train=r.train.replace(etp=1.0) if r.train is not None else None,
                          infer=r.infer.replace(etp=1.0) if r.infer is not None else None)
      for r in plan.roles))
  mem = lambda p: cm.estimate(job, p, cluster_2x8).stage("actor_update")["memory_bytes"]
  assert mem(whole) > mem(plan)
  opts = fw_lib.export_options("slime", plan, job, cluster_2x8)
  assert opts is not None
  e = export.get("slime")
  settings = e.to_config(plan, job, cluster_2x8, **opts)
  back = export.read_config("slime", settings, model=job.actor, response_mean=1000.0,
                            gpus_per_node=8, engine_max_seqs=float(plan.engine.max_seqs))
  assert float(back.plan.role("actor").train.etp) == 2.0
  assert float(cm.estimate(back.job, back.plan, back.cluster).step_time_s) == pytest.approx(
      float(res.best_estimate.step_time_s), rel=1e-5)
  assert "etp2" in export.describe(plan)
