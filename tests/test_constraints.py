"""Tests of the rule table: its three readings agree, its messages name field,
value and rule, its penalty is differentiable, and the search obeys it."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm
from costmodel import internal as cmi
import search
from search._src import space as space_lib

N_PLANS = 12_000
MODELS = ("qwen2.5-1.5b", "llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")
SETS = ((), ("verl",), ("openrlhf",), ("nemo_rl",), ("zero3", "interleave"))
SYNCS = ("per_tensor", "bucketed", "ipc", "reshard")
CLUSTER_GPUS = 32


@pytest.fixture(scope="module")
def cluster():
  return cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=CLUSTER_GPUS // 8)


def _job(model: str, algorithm: str, batch: int) -> cm.RLJob:
  prompts, per_prompt, mini = ((64.0, 8.0, 1), (96.0, 5.0, 4))[batch]
  return cm.RLJob(algorithm, cm.models.get(model), prompts_per_step=prompts,
                  samples_per_prompt=per_prompt, mini_batches=mini)


def _draw(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
  """Random plan columns: odd pools, GQA, MoE and MLA models, engines, weight syncs,
  modes (streaming included)."""
  c = lambda opts, p=None: rng.choice(np.asarray(opts, dtype=np.float64), size=n, p=p)
  d = {"model": rng.integers(0, len(MODELS), n), "ppo": rng.integers(0, 2, n),
       "batch": rng.integers(0, 2, n), "split": rng.integers(0, 2, n),
       "sets": rng.integers(0, len(SETS), n),
       "pool_a": c((1, 2, 4, 8, 16, 32, 3, 5, 6, 12, 24, 2.5),
                   (.1, .1, .15, .2, .15, .05, .05, .05, .05, .05, .04, .01)),
       "pool_b": c((1, 2, 4, 8, 16, 3, 6, 12, 20), (.1, .1, .2, .2, .1, .1, .1, .05, .05)),
       "staleness": c((0, 1), (.7, .3)), "fuse": c((0, 1), (.9, .1)),
       "critic_apart": c((0, 1), (.8, .2)),
       "e_tp": c((1, 2, 4, 8, 3), (.4, .3, .2, .05, .05)),
       "e_pp": c((1, 2, 4, 128), (.7, .2, .05, .05)), "e_ep": c((0, 1, 2), (.7, .25, .05)),
       "sync": rng.choice(len(SYNCS), size=n, p=(.7, .1, .1, .1)),
       "require_batches": c((0, 1, 2, 3), (.75, .1, .1, .05)),
       "mb_a": c((1, 2, 4, 8, 16)), "mb_c": c((1, 2, 4, 8))}
  for r in ("a", "c"):
    d[f"tp_{r}"] = c((1, 2, 4, 8, 16, 3, 1.5), (.35, .25, .2, .1, .04, .04, .02))
    d[f"pp_{r}"] = c((1, 2, 4, 3, 64), (.6, .2, .1, .05, .05))
    d[f"cp_{r}"] = c((1, 2), (.8, .2))
    d[f"ep_{r}"] = c((1, 2, 4, 8, 16, 32, 3), (.6, .1, .1, .1, .04, .03, .03))
    d[f"zero_{r}"] = c((1, 3), (.7, .3))
    d[f"etp_{r}"] = c((1, 2, 1.5), (.8, .15, .05))
    d[f"vpp_{r}"] = c((1, 2, 4, 3), (.9, .05, .03, .02))
  return d


def _layout(d, r, gpus, facts, job_facts, trained, xp=np):
  mb = d[f"mb_{r}"] if trained else 1.0
  f = {**{k: xp.asarray(v[d["model"]]) for k, v in facts.items()}, "gpus": xp.asarray(gpus),
       "tp": xp.asarray(d[f"tp_{r}"]), "pp": xp.asarray(d[f"pp_{r}"]),
       "cp": xp.asarray(d[f"cp_{r}"]), "ep": xp.asarray(d[f"ep_{r}"]),
       "etp": xp.asarray(d[f"etp_{r}"]), "vpp": xp.asarray(d[f"vpp_{r}"]),
       "zero": xp.asarray(d[f"zero_{r}"]), "micro_batch": xp.asarray(mb),
       "trained": float(trained)}
  f.update({k: xp.asarray(v) for k, v in job_facts.items()})
  return f


def _readings(d, rule_sets, xp=np):
  """Mask and exact penalty of every row under ``rule_sets`` (vectorised)."""
  facts = {k: np.asarray([cmi.model_fields(cm.models.get(m))[k] for m in MODELS])
           for k in cmi.model_fields(cm.models.get(MODELS[0]))}
  samples = np.where(d["batch"] == 0, 512.0, 480.0)
  job_facts = {"samples": samples, "mini_batch_samples": samples / np.where(d["batch"] == 0, 1, 4)}
  split = d["split"] == 1
  gen = d["pool_a"]
  train = np.where(split, d["pool_b"], d["pool_a"])
  total = np.where(split, d["pool_a"] + d["pool_b"], d["pool_a"])
  ppo = d["ppo"] == 1
  critic_apart = split & ppo & (d["critic_apart"] == 1)
  critic_gpus = np.where(critic_apart, gen, train)
  mask, pen = np.ones(len(gen), bool), np.zeros(len(gen))

  def add(scope, fields, on=None, sets=()):
    nonlocal mask, pen
    m = np.asarray(cmi.rule_mask(scope, fields, sets, xp=xp))
    p = np.asarray(cmi.rule_penalty(scope, fields, 0.0, sets, xp=xp))
    on = np.ones(len(gen), bool) if on is None else np.asarray(on, bool)
    mask &= m | ~on
    pen += np.where(on, p, 0.0)

  for g in (gen, np.where(split, d["pool_b"], 1.0)):
    add("pool", {"gpus": xp.asarray(g)})
  add("pools", {"total": xp.asarray(total), "cluster_gpus": float(CLUSTER_GPUS)})
  for trained in (True, False):
    add("layout", _layout(d, "a", train, facts, job_facts, trained, xp), sets=rule_sets)
    add("layout", _layout(d, "c", critic_gpus, facts, job_facts, trained, xp), on=ppo,
        sets=rule_sets)
  e_ep = np.where(d["e_ep"] == 1, d["e_tp"], np.where(d["e_ep"] == 2, 2.0, 1.0))
  add("engine", {**{k: xp.asarray(v[d["model"]]) for k, v in facts.items()},
                 "gpus": xp.asarray(gen), "tp": xp.asarray(d["e_tp"]),
                 "pp": xp.asarray(d["e_pp"]), "ep": xp.asarray(e_ep)}, sets=rule_sets)
  add("placement", {"staleness": xp.asarray(d["staleness"]),
                    "actor_on_rollout": xp.asarray((~split).astype(float)),
                    "fuse_training": xp.asarray(d["fuse"]),
                    "critic_on_actor_pool": xp.asarray((ppo & ~critic_apart).astype(float)),
                    "sync_ipc": xp.asarray((d["sync"] == 2).astype(float)),
                    "sync_reshard": xp.asarray((d["sync"] == 3).astype(float)),
                    "require_batches": xp.asarray(d["require_batches"])})
  add("schedule", {"require_batches": xp.asarray(d["require_batches"]),
                   "mini_batches": xp.asarray(np.where(d["batch"] == 0, 1.0, 4.0))})
  return mask, pen


@functools.cache
def _parallel(tp, pp, cp, ep, etp, zero, mb, vpp):
  return cm.Parallel(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, zero_stage=zero, micro_batch=mb,
                     vpp=vpp)


@functools.cache
def _engine(tp, pp, ep, sync):
  return cm.Engine(tp=tp, pp=pp, ep=ep, sync_backend=sync)


def _plan(d, i, job):
  get = lambda k: float(d[k][i])
  par = lambda r, mb: _parallel(get(f"tp_{r}"), get(f"pp_{r}"), get(f"cp_{r}"), get(f"ep_{r}"),
                                get(f"etp_{r}"), get(f"zero_{r}"), mb, get(f"vpp_{r}"))
  split = d["split"][i] == 1
  pools = ((cm.Pool("gen", get("pool_a")), cm.Pool("train", get("pool_b"))) if split
           else (cm.Pool("all", get("pool_a")),))
  train_pool, gen_pool = ("train", "gen") if split else ("all", "all")
  roles = [cm.RolePlan("actor", train_pool, train=par("a", get("mb_a")), infer=par("a", 1.0)),
           cm.RolePlan("reference", train_pool, infer=par("a", 1.0))]
  if job.has_critic:
    pool = gen_pool if d["critic_apart"][i] == 1 else train_pool
    roles.append(cm.RolePlan("critic", pool, train=par("c", get("mb_c")), infer=par("c", 1.0)))
  e_tp = get("e_tp")
  e_ep = {0: 1.0, 1: e_tp, 2: 2.0}[int(d["e_ep"][i])]
  rb = int(d["require_batches"][i]) or None
  return cm.Plan(pools=pools, roles=tuple(roles),
                 engine=_engine(e_tp, get("e_pp"), e_ep, SYNCS[d["sync"][i]]),
                 rollout_pool=gen_pool,
                 mode=cm.Mode(staleness=int(d["staleness"][i]),
                              fuse_training=bool(d["fuse"][i]), require_batches=rb))


def test_validate_mask_and_exact_penalty_agree_on_random_plans(cluster):
  d = _draw(np.random.default_rng(0), N_PLANS)
  readings = [_readings(d, s) for s in SETS]
  mask = np.choose(d["sets"], [r[0] for r in readings])
  pen = np.choose(d["sets"], [r[1] for r in readings])
  np.testing.assert_array_equal(mask, pen <= 0)
  jobs = {}
  raised = np.zeros(N_PLANS, bool)
  for i in range(N_PLANS):
    key = (MODELS[d["model"][i]], ("grpo", "ppo")[d["ppo"][i]], int(d["batch"][i]))
    if key not in jobs:
      jobs[key] = _job(*key)
    job = jobs[key]
    try:
      cm.validate_plan(job, _plan(d, i, job), cluster, frameworks=SETS[d["sets"][i]])
    except ValueError:
      raised[i] = True
  bad = np.flatnonzero(raised == mask)
  assert bad.size == 0, f"validate and the mask disagree on rows {bad[:10]}"
  # Both readings occur often, for every rule set.
  for s in range(len(SETS)):
    sel = d["sets"] == s
    assert 100 < mask[sel].sum() < sel.sum() - 100, SETS[s]


def test_jax_readings_equal_numpy_readings():
  d = _draw(np.random.default_rng(1), 2000)
  for s in SETS:
    m_np, p_np = _readings(d, s)
    m_jx, p_jx = _readings(d, s, xp=jnp)
    np.testing.assert_array_equal(m_np, m_jx)
    np.testing.assert_array_equal(p_np > 0, p_jx > 0)


# ----- messages ----------------------------------------------------------------------


def _mixtral_job():
  return cm.RLJob("grpo", cm.models.get("mixtral-8x7b"), prompts_per_step=64.0)


@pytest.mark.parametrize("model,gpus,train,engine,pattern", [
    ("qwen2.5-1.5b", 8, dict(tp=1.5), {}, r"Parallel: tp=1.5 must be an integer"),
    ("qwen2.5-1.5b", 6, dict(tp=3.0), {},
     r"actor train layout: tp=3 and n_kv_heads=2 must divide one another"),
    ("qwen2.5-1.5b", 8, dict(ep=2.0), {}, r"actor train layout: ep=2 needs an MoE model"),
    ("mixtral-8x7b", 16, dict(ep=16.0), {}, r"ep=16 must divide n_experts=8"),
    ("mixtral-8x7b", 12, dict(pp=3.0, ep=8.0), {},
     r"ep=8 must divide tp\*dp\*cp=4 \(expert ranks ep x etp=1 come from"),
    ("mixtral-8x7b", 8, dict(ep=4.0, etp=4.0), {},
     r"ep=4 x etp=4 must divide tp\*dp\*cp=8 \(expert ranks ep x etp=4 come from"),
    ("mixtral-8x7b", 8, dict(ep=2.0, etp=1.5), {}, r"Parallel: etp=1.5 must be an integer"),
    ("mixtral-8x7b", 8, {}, dict(tp=4.0, ep=2.0),
     r"engine ep=2 must be 1 or equal tp=4 on an MoE model"),
    ("qwen2.5-1.5b", 8, {}, dict(tp=2.0, pp=3.0),
     r"engine tp\*pp=6 must divide the rollout pool's 8 GPUs"),
    ("qwen2.5-1.5b", 32, {}, dict(pp=32.0), r"engine pp=32 exceeds n_layers=28"),
])
def test_messages_name_field_value_and_rule(model, gpus, train, engine, pattern):
  job = cm.RLJob("grpo", cm.models.get(model), prompts_per_step=64.0)
  per_node = 8 if gpus % 8 == 0 else gpus
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=per_node, nodes=gpus // per_node)
  with pytest.raises(ValueError, match=pattern):  # a fractional degree: at construction
    plan = cm.Plan.colocated(job, cluster, train=cm.Parallel(**train),
                             engine=cm.Engine(**engine))
    cm.validate_plan(job, plan, cluster)


def test_etp_counts_only_with_expert_parallelism():
  job = _mixtral_job()
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=1)
  # Without EP the experts follow TP: etp=16 on 8 GPUs does not matter.
  cm.validate_plan(job, cm.Plan.colocated(job, cluster, train=cm.Parallel(etp=16.0)), cluster)
  cm.validate_plan(job, cm.Plan.colocated(job, cluster, train=cm.Parallel(ep=4.0, etp=2.0)),
                   cluster)


def test_sync_and_streaming_rules_come_from_the_table():
  fields = {"staleness": np.zeros(4), "actor_on_rollout": np.array([1.0, 0.0, 1.0, 0.0]),
            "fuse_training": np.zeros(4), "critic_on_actor_pool": np.ones(4),
            "sync_ipc": np.array([1.0, 1.0, 0.0, 0.0]),
            "sync_reshard": np.array([0.0, 0.0, 1.0, 1.0]), "require_batches": np.zeros(4)}
  np.testing.assert_array_equal(cmi.rule_mask("placement", fields), [True, False, False, True])
  streaming = {**fields, "sync_ipc": np.zeros(4), "sync_reshard": np.zeros(4),
               "require_batches": np.array([0.0, 2.0, 2.0, 2.0])}
  np.testing.assert_array_equal(cmi.rule_mask("placement", streaming),
                                [True, True, False, True])
  ok = cmi.rule_mask("schedule", {"require_batches": np.array([0.0, 2.0, 3.0, 4.0]),
                                 "mini_batches": np.array([1.0, 4.0, 4.0, 4.0])})
  np.testing.assert_array_equal(ok, [True, True, False, True])
  np.testing.assert_allclose(cmi.rule_penalty("schedule", {"require_batches": 3.0,
                                                          "mini_batches": 4.0}, 0.0), 1.0 / 3.0)
  with pytest.raises(ValueError, match=r"require_batches=3 must divide the job's mini_batches=4"):
    cmi.check_rules("schedule", {"require_batches": 3, "mini_batches": 4})


def test_zero3_rule_is_an_optional_set(cluster):
  job = _job("qwen2.5-1.5b", "grpo", 0)
  plan = cm.Plan.colocated(job, cluster, train=cm.Parallel(tp=2.0, zero_stage=3.0))
  cm.validate_plan(job, plan, cluster)
  with pytest.raises(ValueError, match=r"zero_stage=3 with tp=2, pp=1, ep=1: ZeRO-3 shards"):
    cm.validate_plan(job, plan, cluster, frameworks=("zero3",))
  with pytest.raises(ValueError, match=r"rule_sets: 'megatron' is not one of"):
    cm.validate_plan(job, plan, cluster, frameworks=("megatron",))


def test_interleave_rule_is_an_optional_set(cluster):
  job = _job("qwen2.5-1.5b", "grpo", 0)  # 28 layers
  uneven = cm.Plan.colocated(job, cluster, train=cm.Parallel(pp=4.0, vpp=2.0))
  cm.validate_plan(job, uneven, cluster)  # Megatron's uneven pipeline layouts run it
  with pytest.raises(ValueError, match=r"pp\*vpp=8 must divide n_layers=28"):
    cm.validate_plan(job, uneven, cluster, frameworks=("interleave",))
  even = cm.Plan.colocated(job, cluster, train=cm.Parallel(pp=2.0, vpp=2.0))
  cm.validate_plan(job, even, cluster, frameworks=("interleave",))
  fields = cmi.layout_fields(job.actor, 8.0, 1.0, np.array([1.0, 2.0, 2.0, 4.0]), 1.0, 1.0,
                            vpp=np.array([2.0, 2.0, 4.0, 1.0]))
  np.testing.assert_array_equal(cmi.rule_mask("layout", fields, ("interleave",)),
                                [False, True, False, True])
  # pp = 1 with vpp = 2 breaks vpp_needs_pp by one stage; pp = 2 with vpp = 4
  # leaves 28 mod 8 = 4 layers over (4 / 8).
  np.testing.assert_allclose(cmi.rule_penalty("layout", fields, 0.0, ("interleave",)),
                             [1.0, 0.0, 0.5, 0.0])


@pytest.mark.parametrize("framework,name", [("verl", "verl/"), ("openrlhf", "openrlhf/"),
                                            ("nemo_rl", "nemo_rl/")])
def test_framework_batch_rules(framework, name):
  # 64 prompts x 8 samples = 512 samples; one mini-batch.
  job = _job("qwen2.5-1.5b", "grpo", 0)
  assert float(job.samples_per_step) == 512.0
  twelve = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=12, nodes=1)
  bad = cm.Plan.colocated(job, twelve, train=cm.Parallel(micro_batch=2.0))
  cm.validate_plan(job, bad, twelve)  # the cost model itself does not mind
  with pytest.raises(ValueError, match=rf"=512 must divide over .*12.*{re.escape(name)}"):
    cm.validate_plan(job, bad, twelve, frameworks=(framework,))
  sixteen = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)
  good = cm.Plan.colocated(job, sixteen, train=cm.Parallel(tp=2.0, micro_batch=4.0))
  cm.validate_plan(job, good, sixteen, frameworks=(framework,))
  # dp = 8 and micro-batch 128: 512 samples do not split into 8 x 128.
  big = cm.Plan.colocated(job, sixteen, train=cm.Parallel(tp=2.0, micro_batch=128.0))
  with pytest.raises(ValueError, match=r"dp=8 x micro_batch=128"):
    cm.validate_plan(job, big, sixteen, frameworks=(framework,))


def test_mode_rule_comes_from_the_table():
  ok = cmi.rule_mask("mode", {"staleness": np.array([0.0, 0.0, 1.0]),
                             "partial": np.array([0.0, 1.0, 1.0])})
  np.testing.assert_array_equal(ok, [True, False, True])
  with pytest.raises(ValueError, match=r"Mode: partial_rollout=True needs staleness >= 1"):
    cm.Mode(partial_rollout=True)


def test_staleness_threshold_rule_comes_from_the_table():
  fields = {"staleness": np.array([0.0, 0.0, 1.0, 2.0]), "partial": np.zeros(4),
            "threshold": np.array([np.nan, 0.5, 0.5, np.nan])}
  np.testing.assert_array_equal(cmi.rule_mask("mode", fields), [True, False, True, True])
  np.testing.assert_array_equal(
      cmi.rule_violations("mode", fields)["threshold_needs_staleness"], [0.0, 1.0, 0.0, 0.0])
  with pytest.raises(ValueError, match=r"Mode: staleness_threshold=0.5 needs staleness >= 1"):
    cm.Mode(staleness_threshold=0.5)
  with pytest.raises(ValueError, match=r"Mode: staleness_threshold=-0.1 must be a number >= 0"):
    cm.Mode(staleness=1, staleness_threshold=-0.1)
  assert cm.Mode(staleness=1, staleness_threshold=0.1).queue_depth == 0.1


def test_unknown_scope_and_rule_names():
  with pytest.raises(ValueError, match=r"scope='layouts' is not one of"):
    cmi.rule_mask("layouts", {})
  with pytest.raises(ValueError, match=r"only: rule 'tp_heads' is not one of"):
    cmi.rule_mask("layout", {}, only=("tp_heads",))


# ----- the relaxed penalty -------------------------------------------------------


def _relaxed_fields(x, model):
  tp, pp, cp, ep, gpus = (jnp.exp2(x[k]) for k in range(5))
  return cmi.layout_fields(model, gpus, tp, pp, cp, ep, zero=3.0, micro_batch=jnp.exp2(x[5]),
                          samples=512.0, mini_batch_samples=128.0, trained=True)


@pytest.mark.parametrize("tau", [1.0, 0.1, 0.0])
def test_penalty_is_finite_with_finite_gradients(tau):
  model = cm.models.get("deepseek-v3")
  sets = cmi.RULE_SETS

  def penalty(x):
    return (cmi.rule_penalty("layout", _relaxed_fields(x, model), tau, sets, xp=jnp)
            + cmi.rule_penalty("engine", cmi.engine_fields(model, jnp.exp2(x[4]), jnp.exp2(x[0]),
                                                         jnp.exp2(x[1]), 1.0), tau, xp=jnp))

  # Degrees that overflow the pool (tp*pp*cp = 2^5.4 on 2^3 GPUs), and whole powers of two.
  for x in (jnp.array([2.3, 1.5, 1.6, 0.7, 3.0, 1.2]), jnp.array([1.0, 0.0, 0.0, 1.0, 3.0, 0.0])):
    value, grad = jax.value_and_grad(penalty)(x)
    assert np.isfinite(float(value))
    assert np.all(np.isfinite(np.asarray(grad)))
  over = float(penalty(jnp.array([2.3, 1.5, 1.6, 0.7, 3.0, 1.2])))
  assert over > 0
  if tau > 0:
    # relu(log2(tp pp cp) - log2 pool) = 5.4 - 3 = 2.4, the engine's 3.8 - 3 = 0.8,
    # ZeRO-3 with tp, pp, ep > 1: 2.3 + 1.5 + 0.7 = 4.5; the rest fit (ep 0.7 <= 3 - 1.5,
    # dp x micro-batch 2^-1.2 <= 128 samples, heads, layers, experts).
    np.testing.assert_allclose(over, 2.4 + 0.8 + 4.5, rtol=1e-5)


def test_relaxed_layout_rule_is_log2_overflow():
  model = cm.models.get("qwen2.5-1.5b")
  f = cmi.layout_fields(model, jnp.asarray(8.0), jnp.asarray(4.0), jnp.asarray(4.0), 1.0, 1.0)
  got = cmi.rule_penalty("layout", f, 1.0, xp=jnp, only=("layout_divides_pool",))
  np.testing.assert_allclose(float(got), 1.0)  # log2(16) - log2(8)
  got = cmi.rule_penalty("layout", f, 0.0, xp=jnp, only=("layout_divides_pool",))
  np.testing.assert_allclose(float(got), 0.5)  # 8 mod 16 / 16


# ----- the search obeys the table ------------------------------------------------


def test_family_space_valid_rows_pass_validate():
  job = cm.RLJob("grpo", cm.models.get("qwen3-30b-a3b"), prompts_per_step=64.0)
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=2)
  fs = space_lib.build("split", job, cluster, search.SpaceOptions.compact())
  rng = np.random.default_rng(0)
  rows = np.stack([rng.choice(v.options, size=4000) for v in fs.vars], -1)
  rows = fs.repair(rows)
  ok = fs.valid(rows)
  assert ok.sum() > 50
  for row in rows[ok][:300]:
    cm.validate_plan(job, fs.to_plan(row), cluster)
  # Expert degrees folded into TP ranks (ep > dp*cp) are in the space now.
  j = {n: fs.index(f"actor.{n}") for n in ("tp", "pp", "ep")}
  g = fs.pool_of(rows, "actor")
  folded = ok & (rows[:, j["ep"]] > g / (rows[:, j["tp"]] * rows[:, j["pp"]]))
  assert folded.any()


def _shrink_step_by_step(sizes, options, n_gpus):
  """The pools' repair one option at a time: while they hold more than the
  cluster, the largest (the first of equals) steps down one option."""
  sizes = list(sizes)
  for _ in range(10_000):
    if sum(sizes) <= n_gpus:
      break
    k = int(np.argmax(sizes))
    i = int(np.searchsorted(options[k], sizes[k]))
    sizes[k] = float(options[k][max(i - 1, 0)])
  return sizes


@pytest.mark.parametrize("family,nodes", [("split", 4), ("split3", 4), ("split3", 128)])
def test_oversized_pools_shrink_as_one_option_at_a_time(family, nodes):
  m = cm.models.get("qwen2.5-7b")
  job = cm.RLJob("ppo", m, prompts_per_step=64.0, reward_model=m)
  cluster = cm.Cluster(cm.hardware.get("H100"), gpus_per_node=8, nodes=nodes)
  fs = space_lib.build(family, job, cluster, search.SpaceOptions.compact())
  cols = [fs.index(f"pool.{p}") for p in fs.structure.pools]
  options = [np.asarray(fs.vars[c].options, np.float64) for c in cols]
  rng = np.random.default_rng(1)
  rows = np.stack([rng.choice(v.options, size=3000) for v in fs.vars], -1)
  # Ties between pools, the first pool largest, the last largest.
  rows[:100, cols[1]] = rows[:100, cols[0]]
  got = fs.repair(rows)[:, cols]
  over = rows[:, cols].sum(-1) > cluster.n_gpus
  assert over.sum() > 500
  for row, out in zip(rows[over, :][:, cols], got[over], strict=True):
    np.testing.assert_array_equal(out, _shrink_step_by_step(row, options, cluster.n_gpus))
  np.testing.assert_array_equal(got[~over], rows[~over][:, cols])


def test_search_returns_only_plans_validate_accepts(split_search, search_job, cluster_2x8):
  assert split_search.top
  for plan, _ in split_search.top:
    cm.validate_plan(search_job, plan, cluster_2x8)
