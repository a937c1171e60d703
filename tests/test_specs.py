"""Spec and plan validation: bad input raises ValueError naming field and value."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel as cm

# ----- Hardware -----------------------------------------------------------------


@pytest.mark.parametrize("field,value,rule", [
    ("hbm_bandwidth_bytes_per_s", -1.0, "> 0"),
    ("peak_flops_per_s", 0.0, "> 0"),
    ("scaleout_latency_s", float("nan"), "> 0"),
    ("matmul_efficiency_max", 1.2, r"\(0, 1\]"),
    ("scaleup_efficiency", 0.0, r"\(0, 1\]"),
])
def test_hardware_rejects_bad_figures(h100, field, value, rule):
  with pytest.raises(ValueError, match=rf"{field}={re.escape(repr(value))} must .*{rule}"):
    h100.replace(**{field: value})


# ----- Cluster -------------------------------------------------------------------


@pytest.mark.parametrize("field,value", [("nodes", 0), ("gpus_per_node", -8), ("nodes", 1.5)])
def test_cluster_rejects_non_positive_counts(h100, field, value):
  kwargs = {"gpus_per_node": 8, "nodes": 1, field: value}
  with pytest.raises(ValueError, match=rf"Cluster: {field}={re.escape(repr(value))} must be a "
                     "positive integer"):
    cm.Cluster(h100, **kwargs)


def test_cluster_rejects_a_domain_that_does_not_tile_nodes(h100):
  with pytest.raises(ValueError, match=r"scaleup_domain=3 must divide or be a multiple of "
                     r"gpus_per_node=8"):
    cm.Cluster(h100, gpus_per_node=8, nodes=2, scaleup_domain=3)


def test_cluster_accepts_a_preset_name_and_defaults():
  cl = cm.Cluster("H200", gpus_per_node=8, nodes=4)
  assert cl.accelerator.name == "H200"
  assert cl.n_gpus == 32 and cl.scaleup_domain == 8 and cl.cpu_cores == 96 * 4


# ----- RLJob ---------------------------------------------------------------------


def test_rljob_unknown_algorithm_lists_the_known_ones(grpo_job):
  with pytest.raises(ValueError, match=r"algorithm='sac' is not one of") as info:
    cm.RLJob("sac", grpo_job.actor)
  for known in ("ppo", "grpo", "dapo", "reinforce_pp", "rloo", "remax"):
    assert repr(known) in str(info.value)


def test_rljob_rejects_a_critic_without_ppo(grpo_job):
  with pytest.raises(ValueError, match=r"critic given but algorithm='grpo' has no critic"):
    cm.RLJob("grpo", grpo_job.actor, critic=grpo_job.actor)


@pytest.mark.parametrize("field,value", [("mini_batches", 0), ("ppo_epochs", 0),
                                         ("mini_batches", 2.0)])
def test_rljob_rejects_bad_counts(grpo_job, field, value):
  with pytest.raises(ValueError, match=rf"{field}={re.escape(repr(value))} must be an integer "
                     ">= 1"):
    cm.RLJob("grpo", grpo_job.actor, **{field: value})


@pytest.mark.parametrize("field,value", [("prompts_per_step", 0.0), ("prompt_len", -5.0),
                                         ("samples_per_prompt", float("inf"))])
def test_rljob_rejects_non_positive_sizes(grpo_job, field, value):
  with pytest.raises(ValueError, match=rf"RLJob: {field}={re.escape(repr(value))} must be a "
                     "finite number > 0"):
    cm.RLJob("grpo", grpo_job.actor, **{field: value})


def test_rljob_rejects_more_mini_batches_than_samples(grpo_job):
  with pytest.raises(ValueError, match=r"mini_batches=64 exceeds the 32 samples"):
    cm.RLJob("grpo", grpo_job.actor, prompts_per_step=4.0, samples_per_prompt=8.0,
             mini_batches=64)


def test_rljob_rejects_undersampling(grpo_job):
  with pytest.raises(ValueError, match=r"oversample=0.5 must be >= 1"):
    cm.RLJob("dapo", grpo_job.actor, oversample=0.5)


def test_rljob_defaults_follow_the_algorithm(grpo_job):
  actor = grpo_job.actor
  ppo = cm.RLJob("ppo", actor)
  assert ppo.critic is actor and ppo.use_reference
  dapo = cm.RLJob("dapo", actor)
  assert dapo.critic is None and not dapo.use_reference
  remax = cm.RLJob("remax", actor, prompts_per_step=10.0, samples_per_prompt=4.0)
  # ReMax adds one greedy rollout per prompt as its baseline.
  assert float(remax.generated_samples_per_step) == 10 * 4 + 10


# ----- ResponseLength -------------------------------------------------------------


@pytest.mark.parametrize("mean,max_len,bins", [(2000.0, 8192.0, None), (900.0, 1000.0, 16),
                                               (700.0, 700.0, 8)])
def test_response_length_from_plain_numbers_matches_the_traced_formula(mean, max_len, bins):
  # Plain numbers take NumPy, traced ones jax.numpy: the same knots.
  plain = cm.ResponseLength.from_mean_max(mean, max_len, bins=bins)
  k = plain.bins
  traced = jax.jit(lambda m, x: cm.ResponseLength.from_mean_max(m, x, bins=k).knots)(
      jnp.float32(mean), jnp.float32(max_len))
  np.testing.assert_allclose(plain.knots, traced, rtol=2e-6)
  # The mean is exact and the last knot is the maximum (hand-derived rules).
  assert float(plain.mean) == pytest.approx(mean, rel=1e-5)
  assert float(plain.max) == max_len and plain.knots.dtype == jnp.float32
  assert k == (bins or max(16, int(np.ceil(2 * max_len / mean))))


def test_response_length_mean_above_max():
  with pytest.raises(ValueError, match=r"mean=5000.0 must not exceed max_len=4096.0"):
    cm.ResponseLength.from_mean_max(5000.0, 4096.0)


def test_response_length_mean_below_what_the_bins_can_hold():
  # 16 bins whose last knot is 8192 and the others at least 1 token: the mean
  # is at least (8192 + 15) / 16 = 512.9.
  with pytest.raises(ValueError, match=r"mean=300.0 is below 512.9.*bins=16"):
    cm.ResponseLength.from_mean_max(300.0, 8192.0, bins=16)
  with pytest.raises(ValueError, match=r"mean=1000.0 is below 4096.*bins=1"):
    cm.ResponseLength.from_mean_max(1000.0, 4096.0, bins=1)


@pytest.mark.parametrize("bins", [0, -3, 2.0])
def test_response_length_bins(bins):
  with pytest.raises(ValueError, match=rf"bins={re.escape(repr(bins))} must be an integer >= 1"):
    cm.ResponseLength.from_mean_max(1000.0, 4096.0, bins=bins)


@pytest.mark.parametrize("field,value", [("mean", 0.0), ("max_len", -1.0)])
def test_response_length_non_positive(field, value):
  kwargs = {"mean": 100.0, "max_len": 1000.0, field: value}
  with pytest.raises(ValueError, match=rf"{field}={re.escape(repr(value))} must be a finite "
                     "number > 0"):
    cm.ResponseLength.from_mean_max(**kwargs)


def test_response_length_knots_must_be_sorted_and_positive():
  with pytest.raises(ValueError, match=r"knots=\[300.0, 200.0, 900.0\] must be sorted ascending"):
    cm.ResponseLength(np.array([300.0, 200.0, 900.0]))
  with pytest.raises(ValueError, match=r"knots=\[0.0, 200.0\] must be finite and > 0"):
    cm.ResponseLength(np.array([0.0, 200.0]))
  with pytest.raises(ValueError, match=r"knots must be a 1-D array"):
    cm.ResponseLength(np.ones((2, 2)))


@pytest.mark.parametrize("mean,max_len,bins", [
    (1000.0, 4096.0, 16), (2000.0, 8192.0, 16), (600.0, 8192.0, 16), (513.0, 8192.0, 16),
    (4000.0, 4096.0, 16), (4096.0, 4096.0, 16), (50.0, 100.0, 8), (20000.0, 32768.0, 32),
    (3000.0, 3000.0, 1), (700.0, 1024.0, 2),
])
def test_from_mean_max_exact_mean_last_knot_max_sorted(mean, max_len, bins):
  r = cm.ResponseLength.from_mean_max(mean, max_len, bins)
  k = np.asarray(r.knots, dtype=float)
  assert r.bins == bins and k.shape == (bins,)
  assert k.mean() == pytest.approx(mean, rel=2e-6)
  assert float(r.mean) == pytest.approx(mean, rel=2e-6)
  assert k[-1] == max_len and float(r.max) == max_len
  assert np.all(np.diff(k) >= 0)
  assert np.all(k >= 1.0 - 1e-6)


@pytest.mark.parametrize("mean,max_len,bins", [
    (1000.0, 4096.0, 16),     # 2 * 4096 / 1000 = 8.2: at least 16
    (300.0, 8192.0, 55),      # ceil(2 * 8192 / 300) = 55
    (200.0, 32768.0, 256),    # ceil(327.7) capped at 256
])
def test_from_mean_max_default_bins_keep_the_tail_thin(mean, max_len, bins):
  r = cm.ResponseLength.from_mean_max(mean, max_len)
  assert r.bins == bins
  assert float(r.max) == max_len
  assert float(r.mean) == pytest.approx(mean, rel=2e-6)


def test_from_mean_max_tail_is_heavy():
  # A mean far below the max puts most bins well under the mean: the long tail.
  k = np.asarray(cm.ResponseLength.from_mean_max(1000.0, 8192.0).knots)
  assert np.sum(k < 1000.0) >= 10
  assert k[-2] < 8192.0


def test_from_samples_bins_and_exact_mean():
  lengths = np.arange(1, 65, dtype=float)  # mean 32.5, max 64, 4 samples per bin
  r = cm.ResponseLength.from_samples(lengths, bins=16)
  k = np.asarray(r.knots)
  assert r.bins == 16
  assert k[-1] == 64.0
  assert k.mean() == pytest.approx(32.5, rel=1e-6)
  assert np.all(np.diff(k) >= 0)
  # Unsorted input gives the same knots; fewer samples than bins gives one
  # bin per sample.
  rng = np.random.default_rng(0)
  np.testing.assert_allclose(
      np.asarray(cm.ResponseLength.from_samples(rng.permutation(lengths), bins=16).knots), k)
  few = cm.ResponseLength.from_samples([5.0, 1.0, 3.0], bins=16)
  np.testing.assert_allclose(np.asarray(few.knots), [1.0, 3.0, 5.0])


@pytest.mark.parametrize("bad", [[], [3.0, 0.0], [[1.0, 2.0]]])
def test_from_samples_rejects_bad_lengths(bad):
  with pytest.raises(ValueError, match=r"lengths must be a non-empty list of positives"):
    cm.ResponseLength.from_samples(bad)


# ----- Parallel, Engine, Mode, Efficiency ----------------------------------------------


@pytest.mark.parametrize("kwargs,pattern", [
    ({"tp": 0}, r"Parallel: tp=0 must be >= 1"),
    ({"pp": 0.5}, r"Parallel: pp=0.5 must be >= 1"),
    ({"cp": float("nan")}, r"Parallel: cp=nan must be >= 1"),
    ({"recompute": "some"}, r"recompute='some' is not one of \('none', 'selective', 'full'\)"),
    ({"recompute": 3}, r"recompute=3 must be one of \(0, 1, 2\)"),
    ({"zero_stage": 5}, r"zero_stage=5 must be one of \(0, 1, 2, 3\)"),
    ({"offload": 0.5}, r"offload=0.5 must be one of \(0, 1\)"),
    ({"micro_batch": 0.0}, r"micro_batch=0.0 must be a finite number > 0"),
])
def test_parallel_rejects_bad_layouts(kwargs, pattern):
  with pytest.raises(ValueError, match=pattern):
    cm.Parallel(**kwargs)


def test_parallel_recompute_names_map_to_codes():
  assert [cm.Parallel(recompute=n).recompute for n in ("none", "selective", "full")] == [0, 1, 2]


@pytest.mark.parametrize("kwargs,pattern", [
    ({"memory_fraction": 1.5}, r"Engine: memory_fraction=1.5 must lie in \(0, 1\]"),
    ({"memory_fraction": 0.0}, r"Engine: memory_fraction=0.0 must lie in \(0, 1\]"),
    ({"tp": 0}, r"Engine: tp=0 must be >= 1"),
    ({"max_seqs": 0.5}, r"Engine: max_seqs=0.5 must be >= 1"),
])
def test_engine_rejects_bad_settings(kwargs, pattern):
  with pytest.raises(ValueError, match=pattern):
    cm.Engine(**kwargs)


def test_mode_rejects_bad_settings():
  with pytest.raises(ValueError, match=r"staleness=-1 must be an integer >= 0"):
    cm.Mode(staleness=-1)
  with pytest.raises(ValueError, match=r"partial_rollout=True needs staleness >= 1"):
    cm.Mode(partial_rollout=True)


@pytest.mark.parametrize("field,value,pattern", [
    ("matmul_half_rows", -1.0, r"matmul_half_rows=-1.0 must be a finite number > 0"),
    ("link_efficiency", 1.5, r"link_efficiency=1.5 must lie in \(0, 1\]"),
    ("generate_overhead_s", -0.1, r"generate_overhead_s=-0.1 must be a finite number >= 0"),
    ("dp_overlap", 1.2, r"dp_overlap=1.2 must lie in \[0, 1\]"),
])
def test_efficiency_rejects_bad_parameters(field, value, pattern):
  with pytest.raises(ValueError, match=pattern):
    dataclasses.replace(cm.Efficiency(), **{field: value})


# ----- Plan validation ----------------------------------------------------------------


def _colocated(job, cluster, **kw):
  return cm.Plan.colocated(job, cluster, **kw)


def test_valid_plans_pass(grpo_job, ppo_job, cluster_2x8):
  cm.validate_plan(grpo_job, _colocated(grpo_job, cluster_2x8, train=cm.Parallel(tp=2.0)),
                   cluster_2x8)
  split = cm.Plan.split(ppo_job, cluster_2x8, 8, train=cm.Parallel(tp=2.0, pp=2.0),
                        engine=cm.Engine(tp=2.0), mode=cm.Mode(staleness=1))
  cm.validate_plan(ppo_job, split, cluster_2x8)
  assert {r.role for r in split.roles} == {"actor", "critic", "reference"}


def test_degrees_must_divide_the_pool(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8, train=cm.Parallel(tp=2.0, pp=3.0))
  with pytest.raises(ValueError, match=r"actor train layout: tp\*pp\*cp=6 must divide the "
                     r"pool's 16 GPUs"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


def test_tp_must_divide_the_heads(grpo_job, cluster_2x8):
  # Qwen2.5-1.5B has 12 query heads.
  assert grpo_job.actor.n_heads == 12
  plan = _colocated(grpo_job, cluster_2x8, train=cm.Parallel(tp=8.0))
  with pytest.raises(ValueError, match=r"tp=8 must divide n_heads=12"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)
  plan = _colocated(grpo_job, cluster_2x8, engine=cm.Engine(tp=8.0))
  with pytest.raises(ValueError, match=r"engine tp=8 must divide n_heads=12"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


def test_pp_must_not_exceed_the_layers(grpo_job, h100):
  cluster = cm.Cluster(h100, gpus_per_node=8, nodes=4)
  plan = _colocated(grpo_job, cluster, train=cm.Parallel(pp=32.0))
  with pytest.raises(ValueError, match=r"pp=32 exceeds n_layers=28"):
    cm.validate_plan(grpo_job, plan, cluster)


def test_pools_larger_than_the_cluster(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8)
  big = plan.replace(pools=(cm.Pool("all", 32.0),))
  with pytest.raises(ValueError, match=r"pools hold 32 GPUs, more than the cluster's 16"):
    cm.validate_plan(grpo_job, big, cluster_2x8)
  frac = plan.replace(pools=(cm.Pool("all", 7.5),))
  with pytest.raises(ValueError, match=r"pool 'all' gpus=7.5 must be a positive integer"):
    cm.validate_plan(grpo_job, frac, cluster_2x8)


def test_a_needed_role_without_a_pool(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8)
  only_actor = plan.replace(roles=tuple(r for r in plan.roles if r.role == "actor"))
  with pytest.raises(ValueError, match=r"role 'reference' needed by algorithm='grpo' has no "
                     "pool"):
    cm.validate_plan(grpo_job, only_actor, cluster_2x8)


def test_unknown_pool_names(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8)
  lost = plan.replace(roles=tuple(
      dataclasses.replace(r, pool="elsewhere") if r.role == "actor" else r for r in plan.roles))
  with pytest.raises(ValueError, match=r"role 'actor' is on pool='elsewhere', not one of "
                     r"\['all'\]"):
    cm.validate_plan(grpo_job, lost, cluster_2x8)
  with pytest.raises(ValueError, match=r"rollout_pool='gen' is not one of \['all'\]"):
    cm.validate_plan(grpo_job, plan.replace(rollout_pool="gen"), cluster_2x8)
  with pytest.raises(ValueError, match=r"pool='gen' is not one of \['all'\]"):
    plan.pool("gen")


def test_roles_the_algorithm_does_not_use(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8)
  extra = plan.replace(roles=plan.roles + (cm.RolePlan("critic", "all", train=cm.Parallel()),))
  with pytest.raises(ValueError, match=r"role 'critic' is not used by algorithm='grpo'"):
    cm.validate_plan(grpo_job, extra, cluster_2x8)
  bogus = plan.replace(roles=plan.roles + (cm.RolePlan("judge", "all", train=cm.Parallel()),))
  with pytest.raises(ValueError, match=r"role='judge' is not one of"):
    cm.validate_plan(grpo_job, bogus, cluster_2x8)
  twice = plan.replace(roles=plan.roles + plan.roles[:1])
  with pytest.raises(ValueError, match=r"role 'actor' is placed twice"):
    cm.validate_plan(grpo_job, twice, cluster_2x8)


def test_staleness_needs_the_actor_off_the_rollout_pool(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8, mode=cm.Mode(staleness=1))
  with pytest.raises(ValueError, match=r"staleness=1 needs the rollout pool 'all' apart from the "
                     "actor's training pool"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


def test_engine_must_divide_the_rollout_pool(grpo_job, cluster_2x8):
  plan = cm.Plan.split(grpo_job, cluster_2x8, 6, train=cm.Parallel(tp=2.0),
                       engine=cm.Engine(tp=4.0))
  with pytest.raises(ValueError, match=r"engine tp\*pp=4 must divide the rollout pool's 6 GPUs"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


def test_engine_ep_needs_an_moe_model(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8, engine=cm.Engine(tp=2.0, ep=2.0))
  with pytest.raises(ValueError, match=r"engine ep=2 must be 1 or equal tp=2 on an MoE model"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


def test_split_needs_gpus_on_both_sides(grpo_job, cluster_2x8):
  for gen in (0, 16):
    with pytest.raises(ValueError, match=rf"gen_gpus={gen} must lie in \(0, 16\)"):
      cm.Plan.split(grpo_job, cluster_2x8, gen)


def test_fuse_training_needs_a_critic_on_the_actor_pool(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8, mode=cm.Mode(fuse_training=True))
  with pytest.raises(ValueError, match=r"fuse_training=True needs a critic"):
    cm.validate_plan(grpo_job, plan, cluster_2x8)


def test_estimate_validates_concrete_plans(grpo_job, cluster_2x8):
  plan = _colocated(grpo_job, cluster_2x8, train=cm.Parallel(tp=8.0))
  with pytest.raises(ValueError, match=r"tp=8 must divide n_heads=12"):
    cm.estimate(grpo_job, plan, cluster_2x8)
