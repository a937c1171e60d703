"""The pipeline interleaving degree (vpp) and the engine's DP-attention as search variables:
where the space offers them, which combinations it excludes, their traced values (one
compiled program), and the searches that choose them."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
import search
from search._src import frameworks as fw_lib
from search._src import space as space_lib
from search._src import valid_space

# DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite, config.json): MLA (latent KV of 512 + 64
# per layer), 64 routed experts top-6, 2 shared, the first layer dense; about 15.7B weights.
LITE = cm.ModelSpec(name="deepseek-v2-lite", n_layers=27, hidden=2048, n_heads=16,
                    n_kv_heads=16, head_dim=128, ffn_hidden=10944, vocab=102400, n_experts=64,
                    top_k=6, expert_ffn_hidden=1408, shared_ffn_hidden=2816,
                    first_dense_layers=1, q_lora_rank=0, kv_lora_rank=512, qk_rope_head_dim=64,
                    v_head_dim=128)


def _job(model, prompts=64.0, **kw):
  return cm.RLJob("grpo", model, prompts_per_step=prompts, **kw)


def _names(fs):
  return set(fs.names)


def test_space_offers_vpp_where_the_layers_allow_and_dp_attention_on_mla(cluster_2x8):
  qwen = space_lib.build("split", _job(cm.models.get("qwen2.5-1.5b")), cluster_2x8)
  # 28 layers: pp x vpp must divide them; only pp = 2 with vpp = 2 does (pp <= 16, vpp <= 4).
  np.testing.assert_array_equal(qwen.var("actor.vpp").options, [1.0, 2.0])
  assert "engine.dp_attention" not in _names(qwen)  # GQA: fixed off
  llama = space_lib.build("split", _job(cm.models.get("llama-3.1-70b")), cluster_2x8)
  np.testing.assert_array_equal(llama.var("actor.vpp").options, [1.0, 2.0, 4.0])  # 80 layers
  dsv3 = space_lib.build("split", _job(cm.models.get("deepseek-v3")), cluster_2x8)
  assert "actor.vpp" not in _names(dsv3)  # 61 layers: no even interleaving
  np.testing.assert_array_equal(dsv3.var("engine.dp_attention").options, [0.0, 1.0])
  # Without a pipeline there is nothing to interleave.
  flat = space_lib.build("split", _job(cm.models.get("llama-3.1-70b")), cluster_2x8,
                         space_lib.SpaceOptions(max_pp=1))
  assert "actor.vpp" not in _names(flat)
  with pytest.raises(ValueError, match=r"vpp=\(3,\) must be powers of two"):
    space_lib.SpaceOptions(vpp=(3,))


@pytest.mark.parametrize("name,vpp,dpa", [("verl", False, False), ("openrlhf", False, False),
                                          ("nemo_rl", False, False), ("slime", False, True),
                                          ("areal", True, True)])
def test_frameworks_fix_off_what_they_cannot_write(name, vpp, dpa, cluster_2x8):
  fw = fw_lib.get(name)
  fam = fw_lib.families_for(_job(cm.models.get("llama-3.1-70b")), name)[0]
  llama = fw.build(fam, _job(cm.models.get("llama-3.1-70b")), cluster_2x8)
  dsv3 = fw.build(fam, _job(cm.models.get("deepseek-v3")), cluster_2x8)
  assert ("actor.vpp" in _names(llama)) == vpp
  assert ("engine.dp_attention" in _names(dsv3)) == dpa


@pytest.mark.parametrize("name", ("slime", "areal"))
def test_dp_attention_plans_the_space_admits_export(name, cluster_2x8):
  cluster = cluster_2x8
  job = _job(cm.models.get("deepseek-v3"), prompts=32.0)
  fw = fw_lib.get(name)
  rng = np.random.default_rng(3)
  seen = 0
  for fam in fw_lib.families_for(job, name, max_staleness=1, partial_rollout=True):
    fs = fw.build(fam, job, cluster, search.SpaceOptions.compact())
    rows = valid_space.Blocks(fs).sample(rng, 30)
    rows = rows[rows[:, fs.index("engine.dp_attention")] == 1.0]
    for row in rows:
      plan = fs.to_plan(row)
      assert plan.engine.dp_attention == 1.0
      assert fw_lib.export_error(name, plan, job, cluster) is None, fam
      seen += 1
  assert seen > 5


def test_areal_exports_interleaved_plans_and_the_plan_file_round_trips(tmp_path, cluster_2x8):
  import export  # pylint: disable=g-import-not-at-top
  job = _job(cm.models.get("llama-3.1-70b"), prompts=16.0)
  fs = fw_lib.get("areal").build("split", job, cluster_2x8, search.SpaceOptions.compact())
  rows = valid_space.Blocks(fs).sample(np.random.default_rng(4), 200)
  rows = rows[rows[:, fs.index("actor.vpp")] > 1]
  assert len(rows)
  plan = fs.to_plan(rows[0])
  vpp = int(plan.role("actor").train.vpp)
  assert vpp > 1 and fw_lib.export_error("areal", plan, job, cluster_2x8) is None
  opts = fw_lib.export_options("areal", plan, job, cluster_2x8)
  e = export.get("areal")
  text = e.export(e.adapt(plan, **opts), job, cluster_2x8, **opts)
  assert f"virtual_pipeline_parallel_size: {vpp}" in text
  path = str(tmp_path / "plan.json")
  export.write_plan(path, plan)
  assert export.read_plan(path).plan == plan
  dpa = plan.replace(engine=plan.engine.replace(dp_attention=1.0))
  export.write_plan(path, dpa)
  assert export.read_plan(path).plan.engine.dp_attention == 1.0


def _valid_row(fs, rng, **set_to):
  rows = valid_space.Blocks(fs).sample(rng, 200)
  for k, v in set_to.items():
    rows = rows[rows[:, fs.index(k)] == v]
  assert len(rows), set_to
  return rows[0].copy()


def test_invalid_interleaving_is_excluded_and_repaired(cluster_2x8):
  job = _job(cm.models.get("qwen2.5-1.5b"))  # 28 layers
  fs = space_lib.build("colocated", job, cluster_2x8, search.SpaceOptions.compact())
  row = _valid_row(fs, np.random.default_rng(5), **{"actor.pp": 2.0, "actor.vpp": 2.0})
  pp, vpp = fs.index("actor.pp"), fs.index("actor.vpp")
  flat, uneven = row.copy(), row.copy()
  flat[pp] = 1.0      # vpp 2 with pp 1
  uneven[pp] = 4.0    # pp x vpp = 8 does not divide 28
  rows = np.stack([row, flat, uneven])
  ok = fs.valid(rows)
  np.testing.assert_array_equal(ok[[0, 1]], [True, False])
  assert not ok[2]
  # The exact penalty at tau = 0 is positive exactly where a row is invalid.
  pen = np.asarray(jax.vmap(lambda v: space_lib.layout_violation(
      fs.structure, v, job, fs.cluster.n_gpus, 0.0))(jnp.asarray(rows)))
  np.testing.assert_array_equal(pen > 0, ~ok)
  fixed = fs.repair(rows)
  assert fixed[1, vpp] == 1.0 and fixed[2, vpp] == 1.0 and fixed[0, vpp] == 2.0
  np.testing.assert_array_equal(fs.valid(fixed[:2]), [True, True])
  # The relaxed measure at tau > 0 leaves vpp with pp = 1 to rounding (the model has no
  # bubble to shorten there) and charges pp x vpp above the layers in log2 units.
  fields = cmi.layout_fields(job.actor, 16.0, 1.0, np.array([1.0, 8.0, 16.0]), 1.0, 1.0,
                            vpp=np.array([2.0, 4.0, 4.0]))
  np.testing.assert_allclose(
      cmi.rule_penalty("layout", fields, 0.5, ("interleave",),
                      only=("vpp_needs_pp", "vpp_divides_layers")),
      [0.0, np.log2(32 / 28), np.log2(64 / 28)], rtol=1e-6)


def test_traced_values_compile_once_and_match_the_concrete_model(cluster_2x8):
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)
  job = _job(LITE, prompts=32.0)
  fs = space_lib.build("colocated", job, cluster, search.SpaceOptions.compact())
  rng = np.random.default_rng(6)
  base = _valid_row(fs, rng, **{"engine.tp": 4.0})
  traces = []

  @jax.jit
  def step_time(v):
    traces.append(1)
    return cm.estimate(job, fs.to_plan(v), cluster, tau=0.0).step_time_s

  rows = []
  for dpa in (0.0, 1.0):
    r = base.copy()
    r[fs.index("engine.dp_attention")] = dpa
    rows.append(r)
  for r in rows:
    exact = float(cm.estimate(job, fs.to_plan(r), cluster).step_time_s)
    assert float(step_time(jnp.asarray(r))) == pytest.approx(exact, rel=1e-5)
  assert len(traces) == 1
  # The flag changes the engine: DP-attention holds the latent KV once per GPU.
  assert float(step_time(jnp.asarray(rows[0]))) != float(step_time(jnp.asarray(rows[1])))
  assert len(traces) == 1


def test_interleaving_leaf_values_share_one_trace():
  job = _job(cm.models.get("qwen2.5-32b"), prompts=8.0, samples_per_prompt=8.0, mini_batches=16)
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=1)
  traces = []

  @jax.jit
  def step_time(vpp):
    traces.append(1)
    plan = cm.Plan.colocated(job, cluster, train=cm.Parallel(tp=2.0, pp=4.0, zero_stage=1.0,
                                                             micro_batch=1.0, vpp=vpp))
    return cm.estimate(job, plan, cluster, tau=0.0).step_time_s

  times = [float(step_time(jnp.asarray(v))) for v in (1.0, 2.0, 4.0)]
  assert len(traces) == 1 and times[0] > times[1] > times[2]


# ----- the searches that choose them ----------------------------------------------------


def _bubble_job():
  """Qwen2.5-32B (64 layers) with 4 samples per update: on 8 training GPUs with TP <= 2 and
  ZeRO-1 it needs pp = 4 and runs 4 micro-batches per update, so the 1F1B bubble
  (pp - 1) / m = 3/4 of an update's passes dominates."""
  return _job(cm.models.get("qwen2.5-32b"), prompts=8.0, samples_per_prompt=8.0, mini_batches=16,
              prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(1000.0, 2048.0))


@pytest.fixture(scope="module")
def bubble_searches(cluster_2x8):
  space = dataclasses.replace(search.SpaceOptions.compact(), max_tp=2, zero_stages=(1,),
                              offload=(0,))
  return {vpp: search.optimize(_bubble_job(), cluster_2x8, families=["split"], starts=8,
                               steps=30, seed=0, space=dataclasses.replace(space, vpp=vpp),
                               top_k=3)
          for vpp in ((1, 2, 4), (1,))}


def test_search_interleaves_when_the_bubble_dominates(bubble_searches, cluster_2x8):
  free, plain = bubble_searches[(1, 2, 4)], bubble_searches[(1,)]
  best = free.best_plan.role("actor").train
  assert float(best.pp) == 4.0 and float(best.vpp) > 1
  assert plain.best_plan.role("actor").train.vpp == 1.0
  t_free, t_plain = float(free.best_estimate.step_time_s), float(plain.best_estimate.step_time_s)
  assert t_free < 0.95 * t_plain
  # The same plan with vpp = 1. Per update the bubble is (pp - 1) / vpp passes of a stage
  # (S + 2 p2p vpp: the hand-offs vpp times as many, which the update's comm gains as
  # n_updates m 2 p2p (vpp - 1)), so bubble(vpp) = bubble(1) / vpp + n_updates (pp - 1)
  # 2 p2p (vpp - 1) / vpp.
  job, v = _bubble_job(), float(best.vpp)
  plain_vpp = lambda lay: lay.replace(vpp=1.0) if lay is not None else None
  one = free.best_plan.replace(roles=tuple(
      dataclasses.replace(r, train=plain_vpp(r.train), infer=plain_vpp(r.infer))
      for r in free.best_plan.roles))
  a_v = free.best_estimate.stage("actor_update")
  a_1 = cm.estimate(job, one, cluster_2x8).stage("actor_update")
  dp = float(free.best_plan.pool(free.best_plan.role("actor").pool).gpus) / (
      float(best.tp) * float(best.pp))
  m = job.samples_per_step / job.mini_batches / (dp * float(best.micro_batch))
  p2p2 = (a_v["comm_s"] - a_1["comm_s"]) / (job.mini_batches * m * (v - 1.0))  # 2 p2p
  expect = a_1["bubble_s"] / v + job.mini_batches * (float(best.pp) - 1.0) / v * p2p2 * (v - 1.0)
  assert a_v["bubble_s"] == pytest.approx(float(expect), rel=1e-4)
  assert a_v["bubble_s"] / a_1["bubble_s"] == pytest.approx(1.0 / v, rel=0.05)


def test_search_takes_dp_attention_for_an_mla_engine_whose_kv_binds():
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)
  job = _job(LITE, prompts=256.0, samples_per_prompt=16.0, prompt_len=1024.0,
             response=cm.ResponseLength.from_mean_max(4000.0, 16384.0))
  res = search.optimize(job, cluster, families=["split"], starts=8, steps=30, seed=0,
                        space=search.SpaceOptions.compact(), top_k=3)
  e = res.best_plan.engine
  assert e.dp_attention == 1.0 and float(e.tp) > 1
  # Without it the latent KV sits on every TP rank: the engine holds about tp-fold fewer
  # sequences, its KV capacity binds, and the step is slower. (Capacity is compared with
  # the concurrency cap lifted: plans of equal step time may differ in memory fraction.)
  off = res.best_plan.replace(engine=e.replace(dp_attention=0.0, ep=1.0))
  est_off = cm.estimate(job, off, cluster)
  assert float(est_off.gen_concurrency) < float(res.best_estimate.gen_concurrency)
  assert float(est_off.step_time_s) > float(res.best_estimate.step_time_s)
  uncapped = lambda p: float(cm.estimate(job, p.replace(engine=p.engine.replace(
      max_seqs=16384.0)), cluster).gen_concurrency)
  assert uncapped(res.best_plan) == pytest.approx(float(e.tp) * uncapped(off), rel=0.1)


def test_dense_gqa_search_keeps_dp_attention_off(split_search):
  assert split_search.best_plan.engine.dp_attention == 0.0
  for plan, _ in split_search.top:
    assert plan.engine.dp_attention == 0.0
