"""Exports of a grid of plans, checked against the frameworks' pinned sources.

Every family (colocated, split, split async, split async with partial rollout,
three pools), algorithm (PPO with critic, GRPO, DAPO, RLOO, REINFORCE++, ReMax),
dense and MoE models, with and without a reward model, exported to every
framework with each of its options. Each export either passes the checks of
``framework_checks`` and ``cli_checks`` (keys and flags of the pinned commit, value types, the
framework's runtime assertions) or is refused with a ValueError that names the
setting. The counts are pinned so that a change in what exports is noticed.
"""

from __future__ import annotations

import collections
import dataclasses
import re

import cli_checks
import framework_checks
import pytest
import yaml

import costmodel as cm
import export

QWEN7B = cm.models.get("qwen2.5-7b")
MOE = cm.models.get("qwen3-30b-a3b")
RM = cm.models.get("qwen2.5-1.5b")
CLUSTER = cm.Cluster("H100", 8, 2)
ONE_NODE = cm.Cluster("H100", 8, 1)

OPTIONS = {
    "verl": [{"strategy": s, "version": v, "async_recipe": r}
             for s in ("fsdp", "megatron") for v, r in (("v1", "fully_async"),
                                                       ("legacy", "fully_async"),
                                                       ("legacy", "one_step_off"))],
    "openrlhf": [{"vllm_default_max_seqs": True}],
    "nemo_rl": [{"backend": None}, {"backend": "dtensor"}, {"backend": "megatron"}],
    "slime": [{}],
    "areal": [{}],
}


def _job(algorithm, model=QWEN7B, reward=None):
  resp = cm.ResponseLength.from_mean_max(1500.0, 4096.0)
  kw = dict(prompts_per_step=128, samples_per_prompt=8, prompt_len=1024, response=resp,
            mini_batches=4, reward_model=reward)
  if algorithm == "ppo":
    kw.update(samples_per_prompt=1, prompts_per_step=256, ppo_epochs=1)
  if algorithm == "dapo":
    kw.update(oversample=1.5)
  return cm.RLJob(algorithm, model, **kw)


def _layouts(job):
  """(name, train layout, engine, reference layout changes) of the three layout families:
  an FSDP-style one (its reference streams parameters from the host, offload 1), a
  Megatron-style one (its reference swaps its weights to the host, swap 1) and a Megatron
  one with the CPU optimizer (its reference resident)."""
  moe = job.actor.n_experts > 0
  fsdp = cm.Parallel(cp=2 if not moe else 1, micro_batch=2, zero_stage=3, recompute="full")
  mega = cm.Parallel(tp=2, pp=2, ep=4 if moe else 1, micro_batch=1, zero_stage=1,
                     recompute="full" if moe else "selective", offload=0)
  engine = cm.Engine(tp=2, ep=2 if moe else 1, memory_fraction=0.7, max_seqs=256)
  return (("zero3", fsdp, engine, {"offload": 1.0}), ("megatron", mega, engine, {"swap": 1.0}),
          ("zero1-offload", mega.replace(offload=1), cm.Engine(tp=1, max_seqs=512),
           {"offload": 0.0}))


def with_roles(plan, ref=None, swap=False):
  """``plan`` with the reference's inference layout changed by ``ref`` and, with ``swap``,
  the actor and critic swapping their state to the host between steps."""
  roles = []
  for r in plan.roles:
    train, infer = r.train, r.infer_layout
    if r.role == "reference" and ref:
      infer = infer.replace(**ref)
    if swap and r.role in ("actor", "critic"):
      train, infer = train.replace(swap=1.0), infer.replace(swap=1.0)
    roles.append(cm.RolePlan(r.role, r.pool, train=train, infer=infer))
  return plan.replace(roles=tuple(roles))


def _plans():
  jobs = {
      "grpo": _job("grpo"), "ppo": _job("ppo"), "dapo-moe": _job("dapo", MOE),
      "grpo-moe": _job("grpo", MOE), "ppo-moe": _job("ppo", MOE), "rloo": _job("rloo"),
      "reinforce_pp": _job("reinforce_pp"),
      "remax": _job("remax"), "ppo-rm": _job("ppo", reward=RM), "grpo-rm": _job("grpo", reward=RM),
  }
  modes = {"sync": cm.Mode(), "async1": cm.Mode(staleness=1),
           "async2-partial": cm.Mode(staleness=2, partial_rollout=True)}
  grid = []
  for jname, job in jobs.items():
    for lname, train, engine, ref in _layouts(job):
      if job.has_reward_model:  # three pools: generation, training, the reward model
        p = cm.Parallel(tp=2, micro_batch=4, zero_stage=3)
        for mname in ("sync", "async2-partial"):
          roles = [cm.RolePlan("actor", "train", train=train),
                   cm.RolePlan("reward", "rm", infer=p)]
          if job.use_reference:
            roles.append(cm.RolePlan("reference", "train", infer=train))
          if job.has_critic:
            roles.append(cm.RolePlan("critic", "train", train=train))
          pools = (cm.Pool("gen", 4.0), cm.Pool("train", 8.0), cm.Pool("rm", 4.0))
          grid.append((f"{jname}/{lname}/split3-{mname}", job, with_roles(cm.Plan(
              pools=pools, roles=tuple(roles), engine=engine, rollout_pool="gen",
              mode=modes[mname]), ref)))
        grid.append((f"{jname}/{lname}/colocated-rm", job, with_roles(cm.Plan.colocated(
            job, CLUSTER, train=train, engine=engine), ref)))
        continue
      colocated = cm.Plan.colocated(job, CLUSTER, train=train, engine=engine)
      grid.append((f"{jname}/{lname}/colocated", job, with_roles(colocated, ref)))
      grid.append((f"{jname}/{lname}/colocated-swap", job, with_roles(colocated, ref, swap=True)))
      for mname, mode in modes.items():
        split = cm.Plan.split(job, CLUSTER, gen_gpus=8, train=train, engine=engine, mode=mode)
        grid.append((f"{jname}/{lname}/split-{mname}", job, with_roles(split, ref)))
        if mname == "sync":
          grid.append((f"{jname}/{lname}/split-sync-swap", job, with_roles(split, ref, swap=True)))
  grid = [(name, job, plan, CLUSTER) for name, job, plan in grid]
  # One node: generation on part of it (NeMo-RL's single-node resources, striped pools).
  for jname in ("grpo", "ppo", "dapo-moe"):
    job = jobs[jname]
    _, train, engine, ref = _layouts(job)[0]
    for mname, mode in modes.items():
      grid.append((f"{jname}/zero3/one-node-split-{mname}", job, with_roles(cm.Plan.split(
          job, ONE_NODE, gen_gpus=4, train=train, engine=engine, mode=mode), ref), ONE_NODE))
    grid.append((f"{jname}/zero3/one-node-colocated", job, with_roles(
        cm.Plan.colocated(job, ONE_NODE, train=train, engine=engine), ref), ONE_NODE))
  grid += _feature_plans(jobs)
  for _, job, plan, cluster in grid:
    cm.validate_plan(job, plan, cluster)  # the grid holds only plans that exist
  return grid


def _feature_plans(jobs):
  """Plans with the engine, expert and mode settings beyond layouts: eager decoding, data-
  parallel attention with an FP8 KV cache, expert tensor parallelism, streaming trainer
  calls, a fractional staleness bound, rollout log-probs, the reshard sync, FP8 training."""
  grpo, moe = jobs["grpo"], jobs["grpo-moe"]
  _, mega, engine, ref = _layouts(grpo)[1]
  _, mega_moe, engine_moe, ref_moe = _layouts(moe)[1]
  a1, a2 = cm.Mode(staleness=1), cm.Mode(staleness=2, partial_rollout=True)
  out = []

  def split(name, job, train, eng, mode, ref):
    out.append((name, job, with_roles(cm.Plan.split(job, CLUSTER, gen_gpus=8, train=train,
                                               engine=eng, mode=mode), ref), CLUSTER))

  split("grpo/megatron/eager", grpo, mega, engine.replace(cuda_graphs=False), a1, ref)
  split("grpo-moe/megatron/dp-attention-kv8", moe, mega_moe, engine_moe.replace(
      dp_attention=True, precision=cm.Precision(kv="fp8")), a2, ref_moe)
  split("grpo-moe/megatron/etp2", moe, mega_moe.replace(ep=2, etp=2), engine_moe, a2, ref_moe)
  split("grpo/megatron/stream2", grpo, mega, engine,
        dataclasses.replace(a2, require_batches=2), ref)
  split("grpo/megatron/threshold0.5", grpo, mega, engine,
        dataclasses.replace(a1, staleness_threshold=0.5, partial_rollout=True), ref)
  split("grpo/megatron/rollout-logp", grpo, mega, engine,
        dataclasses.replace(a1, rollout_log_probs=True), ref)
  split("grpo/megatron/reshard", grpo, mega.replace(recompute="full"),
        engine.replace(sync_backend="reshard"), a1, ref)
  split("grpo/megatron/fp8-train", grpo, mega.replace(precision=cm.Precision(compute="fp8")),
        engine, a1, ref)
  return out


# The weight sync each framework runs, colocated and apart (the exporters refuse any other):
# veRL's naive and nccl checkpoint engines, OpenRLHF's CUDA IPC (colocate_all) and NCCL
# broadcasts, NeMo-RL's and slime's CUDA IPC refit and NCCL buckets, AReaL's xccl buckets.
SYNC = {"verl": ("per_tensor", "bucketed"), "openrlhf": ("ipc", "per_tensor"),
        "nemo_rl": ("ipc", "bucketed"), "slime": ("ipc", "bucketed"),
        "areal": ("bucketed", "bucketed")}


def for_framework(framework, plan):
  """The plan with the weight sync ``framework`` runs for its placement (a plan asking
  for reshard keeps it: NeMo-RL has it, the others refuse it)."""
  if plan.engine.sync_backend == "reshard":
    return plan
  backend = SYNC[framework][0 if plan.shares_pool("actor") else 1]
  return plan.replace(engine=plan.engine.replace(sync_backend=backend))


GRID = _plans()

CHECKS = {"verl": framework_checks.check_verl, "openrlhf": cli_checks.check_openrlhf,
          "nemo_rl": framework_checks.check_nemo_rl, "slime": cli_checks.check_slime,
          "areal": framework_checks.check_areal}


def _run(framework, name, job, plan, cluster, options):
  """('ok', settings) or ('refused', message); checks failing raise AssertionError."""
  e = export.get(framework)
  try:
    settings = e.to_config(for_framework(framework, plan), job, cluster, **options)
  except ValueError as err:
    return "refused", str(err)
  problems = CHECKS[framework](settings)
  assert not problems, f"{framework} {options} {name}: {problems}"
  return "ok", settings


def _all_exports():
  out = []
  for framework, variants in OPTIONS.items():
    for options in variants:
      for name, job, plan, cluster in GRID:
        out.append((framework, options, name, job, plan,
                    *_run(framework, name, job, plan, cluster, options)))
  return out


@pytest.fixture(scope="module")
def exports():
  return _all_exports()


# A refusal names the setting: a dotted key or flag with its value, or the option.
_NAMED = re.compile(r"([\w.]+=|--[a-z][\w.-]*|\b[a-z_]+\.[a-z_.]+\b|algorithm=)")


def test_grid_covers_every_family_mode_algorithm():
  names = [n for n, _, _, _ in GRID]
  assert len(GRID) == 182
  for part in ("colocated", "colocated-swap", "split-sync", "split-sync-swap", "split-async1",
               "split-async2-partial", "split3-sync", "split3-async2-partial", "colocated-rm",
               "eager", "dp-attention-kv8", "etp2", "stream2", "threshold0.5", "rollout-logp",
               "reshard", "fp8-train"):
    assert any(f"/{part}" in n for n in names), part
  algorithms = {job.algorithm for _, job, _, _ in GRID}
  assert algorithms == {"ppo", "grpo", "dapo", "rloo", "reinforce_pp", "remax"}
  assert any(job.actor.n_experts for _, job, _, _ in GRID)
  assert any(job.has_critic and job.has_reward_model for _, job, _, _ in GRID)
  assert {c.nodes for _, _, _, c in GRID} == {1, 2}


def test_every_export_passes_the_pinned_checks_or_is_refused_naming_the_setting(exports):
  counts = collections.Counter()
  for framework, _, name, _, _, status, result in exports:
    counts[framework, status] += 1
    if status == "refused":
      fw_names = {"verl": "veRL", "openrlhf": "OpenRLHF", "nemo_rl": "NeMo-RL",
                  "slime": "slime", "areal": "AReaL"}
      assert result.startswith(fw_names[framework]), f"{name}: {result}"
      assert _NAMED.search(result), f"{framework} {name}: refusal names no setting: {result}"
  for framework in OPTIONS:
    assert counts[framework, "ok"] > 0, f"no {framework} export passes"
  assert dict(counts) == EXPECTED_COUNTS


# 182 plans x 12 exporter variants = 2,184 exports: 556 pass, 1,628 are refused.
EXPECTED_COUNTS = {
    ("verl", "ok"): 324, ("verl", "refused"): 768,
    ("openrlhf", "ok"): 28, ("openrlhf", "refused"): 154,
    ("nemo_rl", "ok"): 140, ("nemo_rl", "refused"): 406,
    ("slime", "ok"): 37, ("slime", "refused"): 145,
    ("areal", "ok"): 27, ("areal", "refused"): 155,
}


def test_exports_carry_the_plan(exports):
  """What each framework's settings must say about the plan, beyond key validity."""
  for framework, options, name, job, plan, status, s in exports:
    if status != "ok":
      continue
    k = plan.mode.staleness
    moe = job.actor.n_experts > 0
    actor = plan.role("actor").train
    if framework == "verl":
      if s.get("trainer.v1.trainer_mode") == "separate_async":
        # replay_buffer.py drops a trajectory when g - s + 1 > threshold
        assert s["trainer.v1.sampler.max_off_policy_threshold"] == k + 1, name
      if "async_training.staleness_threshold" in s:
        assert s["async_training.staleness_threshold"] == plan.mode.queue_depth, name
        calls = plan.mode.require_batches or job.mini_batches
        assert s["async_training.require_batches"] == calls, name
      # swap is the *_offload keys, the CPU optimizer offload_policy / optimizer_cpu_offload
      a = "actor_rollout_ref.actor"
      swap, off = bool(float(actor.swap)), bool(float(actor.offload))
      if options["strategy"] == "megatron":
        assert s[f"{a}.megatron.param_offload"] is swap, name
        assert s[f"{a}.megatron.optimizer_offload"] is swap, name
        assert (f"+{a}.optim.override_optimizer_config.optimizer_cpu_offload" in s) is off, name
      else:
        assert s[f"{a}.fsdp_config.param_offload"] is swap, name
        assert s.get(f"{a}.fsdp_config.offload_policy", False) is off, name
      assert s["actor_rollout_ref.rollout.enforce_eager"] is (not plan.engine.cuda_graphs)
      if options["strategy"] == "megatron" and moe:
        etp = s["actor_rollout_ref.actor.megatron.expert_tensor_parallel_size"]
        assert etp == float(actor.etp), name
        if job.has_critic:  # the critic of an MoE actor is MoE too
          assert s["critic.megatron.expert_tensor_parallel_size"] == etp, name
      if job.has_reward_model:
        assert s["reward.reward_model.enable"] is True and "reward_model.enable" not in s
      assert s["trainer.use_v1"] is (options["version"] == "v1")
    elif framework == "openrlhf":
      argv = s
      if job.algorithm == "dapo":
        assert argv[argv.index("--rollout.vllm_generate_batch_size") + 1] == "192"  # 128 x 1.5
      assert ("--train.async_enable" in argv) == (k > 0)
      assert ("--ds.adam_offload" in argv) == bool(float(actor.offload)), name
      assert ("--ds.enable_sleep" in argv) == bool(float(actor.swap)), name
    elif framework == "nemo_rl":
      loss = s.get("loss_fn", {})
      if job.use_reference:
        assert "reference_policy_kl_penalty" not in loss
      else:
        assert loss["reference_policy_kl_penalty"] == 0, name
      gen = s["policy"]["generation"]
      assert gen["vllm_cfg"]["enable_prefix_caching"] == plan.engine.prefix_caching
      assert gen["vllm_kwargs"] == {"max_num_seqs": int(plan.engine.max_seqs)}
      assert s["defaults"].startswith("ppo" if job.algorithm == "ppo" else "grpo")
      fp8 = s["policy"]["megatron_cfg"].get("fp8_cfg", {}).get("enabled", False)
      assert fp8 == (actor.precision.compute == "fp8"), name
      if s["policy"]["megatron_cfg"]["enabled"]:
        opt = s["policy"]["megatron_cfg"]["optimizer"]
        assert opt.get("optimizer_cpu_offload", False) is bool(float(actor.offload)), name
      else:
        assert s["policy"]["dtensor_cfg"]["cpu_offload"] is bool(float(actor.offload)), name
      # the policy's state goes to the host when generation shares its GPUs, and in PPO
      assert bool(float(actor.swap)) is (plan.shares_pool("actor") or job.algorithm == "ppo")
      if job.algorithm == "rloo":
        assert s["grpo"]["use_leave_one_out_baseline"] is True
      if job.algorithm == "reinforce_pp":
        assert s["grpo"]["adv_estimator"] == {"name": "reinforce_plus_plus"}
    elif framework == "slime":
      assert s["script"] == ("train_async.py" if k else "train.py")
      argv = s["argv"]
      estimator = argv[argv.index("--advantage-estimator") + 1]
      assert estimator == {"ppo": "ppo", "reinforce_pp": "reinforce_plus_plus"}.get(
          job.algorithm, "grpo")
      assert ("--optimizer-cpu-offload" in argv) == bool(float(actor.offload)), name
      assert ("--fp8-format" in argv) == (actor.precision.compute == "fp8"), name
      swapped = "--offload-train" in argv or ("--colocate" in argv
                                              and "--no-offload-train" not in argv)
      assert swapped == bool(float(actor.swap)), name
    elif framework == "areal":
      assert s["rollout"]["max_head_offpolicyness"] == k
      assert s["actor"]["offload"] is bool(float(actor.swap)), name
      assert s["actor"].get("fsdp", {}).get("offload_params", False) is bool(
          float(actor.offload)), name
      assert s["sglang"]["disable_cuda_graph"] is (not plan.engine.cuda_graphs)
      norm = s["actor"].get("reward_norm", {})
      assert norm.get("mean_leave1out", False) == (job.algorithm == "rloo")
      assert (norm.get("std_level") == "group") == (job.algorithm in ("grpo", "dapo"))
      if job.algorithm == "dapo":
        assert s["dynamic_bs"] is True and s["rollout"]["consumer_batch_size"] == 192
      assert ("critic" in s) == job.has_critic and ("ref" in s) == job.use_reference
      _, dims = framework_checks.parse_backend(s["rollout"]["backend"], inference=True)
      assert dims["d"] * dims["t"] * dims["p"] == float(plan.pool(plan.rollout_pool).gpus)


def test_every_rendered_export_states_its_version_and_parses(exports):
  seen = set()
  for framework, _, _, _, _, status, settings in exports:
    if status != "ok" or framework in seen:
      continue
    seen.add(framework)
    e = export.get(framework)
    text = e.render(settings)
    head, body = text.split("\n", 1)
    assert head == e.header() and e.version in head
    if e.kind == "yaml":
      assert yaml.safe_load(body) == settings
  assert seen == set(OPTIONS)
