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
  """(name, train layout, engine) pairs: an FSDP-style and a Megatron-style one."""
  moe = job.actor.n_experts > 0
  fsdp = cm.Parallel(cp=2 if not moe else 1, micro_batch=2, zero_stage=3, recompute="full")
  mega = cm.Parallel(tp=2, pp=2, ep=4 if moe else 1, micro_batch=1, zero_stage=1,
                     recompute="full" if moe else "selective", offload=0)
  engine = cm.Engine(tp=2, ep=2 if moe else 1, memory_fraction=0.7, max_seqs=256)
  return (("zero3", fsdp, engine), ("megatron", mega, engine),
          ("zero1-offload", mega.replace(offload=1), cm.Engine(tp=1, max_seqs=512)))


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
    for lname, train, engine in _layouts(job):
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
          grid.append((f"{jname}/{lname}/split3-{mname}", job, cm.Plan(
              pools=pools, roles=tuple(roles), engine=engine, rollout_pool="gen",
              mode=modes[mname])))
        grid.append((f"{jname}/{lname}/colocated-rm", job, cm.Plan.colocated(
            job, CLUSTER, train=train, engine=engine)))
        continue
      grid.append((f"{jname}/{lname}/colocated", job,
                   cm.Plan.colocated(job, CLUSTER, train=train, engine=engine)))
      for mname, mode in modes.items():
        grid.append((f"{jname}/{lname}/split-{mname}", job,
                     cm.Plan.split(job, CLUSTER, gen_gpus=8, train=train, engine=engine,
                                   mode=mode)))
  grid = [(name, job, plan, CLUSTER) for name, job, plan in grid]
  # One node: generation on part of it (NeMo-RL's single-node resources, striped pools).
  for jname in ("grpo", "ppo", "dapo-moe"):
    job = jobs[jname]
    _, train, engine = _layouts(job)[0]
    for mname, mode in modes.items():
      grid.append((f"{jname}/zero3/one-node-split-{mname}", job, cm.Plan.split(
          job, ONE_NODE, gen_gpus=4, train=train, engine=engine, mode=mode), ONE_NODE))
    grid.append((f"{jname}/zero3/one-node-colocated", job,
                 cm.Plan.colocated(job, ONE_NODE, train=train, engine=engine), ONE_NODE))
  for _, job, plan, cluster in grid:
    cm.validate_plan(plan, job, cluster)  # the grid holds only plans that exist
  return grid


GRID = _plans()

CHECKS = {"verl": framework_checks.check_verl, "openrlhf": cli_checks.check_openrlhf,
          "nemo_rl": framework_checks.check_nemo_rl, "slime": cli_checks.check_slime,
          "areal": framework_checks.check_areal}


def _run(framework, name, job, plan, cluster, options):
  """('ok', settings) or ('refused', message); checks failing raise AssertionError."""
  e = export.get(framework)
  try:
    settings = e.to_config(plan, job, cluster, **options)
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
  assert len(GRID) == 126
  for part in ("colocated", "split-sync", "split-async1", "split-async2-partial",
               "split3-sync", "split3-async2-partial", "colocated-rm"):
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


# 126 plans x 12 exporter variants = 1,512 exports: 541 pass, 971 are refused.
EXPECTED_COUNTS = {
    ("verl", "ok"): 234, ("verl", "refused"): 522,
    ("openrlhf", "ok"): 24, ("openrlhf", "refused"): 102,
    ("nemo_rl", "ok"): 192, ("nemo_rl", "refused"): 186,
    ("slime", "ok"): 36, ("slime", "refused"): 90,
    ("areal", "ok"): 55, ("areal", "refused"): 71,
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
        assert s["async_training.staleness_threshold"] == k
      if options["strategy"] == "megatron" and moe:
        assert s["actor_rollout_ref.actor.megatron.expert_tensor_parallel_size"] == 1, name
        if job.has_critic:  # the critic of an MoE actor is MoE too
          assert s["critic.megatron.expert_tensor_parallel_size"] == 1, name
      if job.has_reward_model:
        assert s["reward.reward_model.enable"] is True and "reward_model.enable" not in s
      assert s["trainer.use_v1"] is (options["version"] == "v1")
    elif framework == "openrlhf":
      argv = s
      if job.algorithm == "dapo":
        assert argv[argv.index("--rollout.vllm_generate_batch_size") + 1] == "192"  # 128 x 1.5
      assert ("--train.async_enable" in argv) == (k > 0)
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
      if float(actor.offload) and s["policy"]["megatron_cfg"]["enabled"]:
        assert s["policy"]["megatron_cfg"]["optimizer"]["optimizer_cpu_offload"] is True
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
    elif framework == "areal":
      assert s["rollout"]["max_head_offpolicyness"] == k
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
