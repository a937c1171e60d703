"""Imports of framework configs: the round trip over the export grid, the forms a
veRL run comes in, and a real veRL example script's overrides."""

from __future__ import annotations

import collections
import os

import pytest
import test_export_frameworks as grid
import yaml

import costmodel as cm
import export

DATA = os.path.join(os.path.dirname(__file__), "data")
EXAMPLE = os.path.join(DATA, "verl_examples", "run_qwen3_8b_fsdp_1dda039.txt")


def _given(job, plan):
  kw = dict(model=job.actor, response_mean=1500.0, gpus_per_node=8,
            engine_max_seqs=float(plan.engine.max_seqs))
  if job.reward_model is not None:
    kw["reward_model"] = job.reward_model
  if job.algorithm == "dapo":  # AReaL's config does not state the filter's keep rate
    kw["oversample"] = float(job.oversample)
  return kw


def _round_trip(framework):
  """(counts, failures) of import(export(plan)) over the grid of tests/test_export_frameworks."""
  counts, failures = collections.Counter(), []
  unexpressed = export.unexpressed(framework)
  for name, job, plan, cluster in grid.GRID:
    plan = grid.for_framework(framework, plan)
    for options in grid.OPTIONS[framework]:
      try:
        settings = export.get(framework).to_config(plan, job, cluster, **options)
      except ValueError:
        counts["refused"] += 1
        continue
      back = export.read_config(framework, settings, **_given(job, plan))
      same = (export.plan_settings(back.plan, unexpressed)
              == export.plan_settings(plan, unexpressed))
      counts["same" if same else "different"] += 1
      actor = plan.role("actor").train
      counts["swap"] += same and float(actor.swap) == 1.0
      counts["offload"] += same and float(actor.offload) == 1.0
      if not same:
        failures.append((name, options))
      assert back.job.algorithm == job.algorithm
      assert float(back.job.prompts_per_step) == float(job.prompts_per_step)
      assert back.job.mini_batches == job.mini_batches and back.job.ppo_epochs == job.ppo_epochs
      assert back.cluster.n_gpus >= sum(float(p.gpus) for p in plan.pools)
  return counts, failures


# Exports of the grid each framework accepts (the rest it refuses, tests/test_export_frameworks).
EXPECTED = {"verl": 324, "openrlhf": 28, "nemo_rl": 140, "slime": 37, "areal": 27}


@pytest.mark.parametrize("framework", sorted(EXPECTED))
def test_import_of_every_export_of_the_grid_is_the_same_plan(framework):
  counts, failures = _round_trip(framework)
  assert failures == []
  assert counts["same"] == EXPECTED[framework]
  # Plans whose actor swaps its state between stages, and plans with the CPU optimizer,
  # come back as they went (the grid's CPU-optimizer layouts are Megatron-style with PP 2,
  # which OpenRLHF's DeepSpeed and AReaL's fsdp backend do not run: test_export.py and
  # test_openrlhf_adam_offload_round_trip cover theirs).
  assert counts["swap"] > 0
  assert counts["offload"] > 0 or framework in ("openrlhf", "areal")


def test_unexpressed_fields_are_few_and_named():
  assert export.unexpressed("verl") == {
      "reward.infer": ("micro_batch", "zero_stage", "recompute", "sequence_parallel")}
  assert export.unexpressed("openrlhf")["engine"] == ("max_seqs",)
  assert set(export.unexpressed("nemo_rl")) == {"reference.infer", "reward.infer"}
  assert export.unexpressed("slime") == {"reference.infer": ("zero_stage", "recompute")}
  assert export.unexpressed("areal") == {
      "reference.infer": ("micro_batch", "zero_stage", "recompute")}


def test_plan_settings_tells_different_plans_apart():
  plan, job, cluster = grid.GRID[0][2], grid.GRID[0][1], grid.GRID[0][3]
  other = plan.replace(engine=plan.engine.replace(max_seqs=128.0))
  assert export.plan_settings(plan) != export.plan_settings(other)
  assert export.plan_settings(plan, {"engine": ("max_seqs",)}) == export.plan_settings(
      other, {"engine": ("max_seqs",)})
  # An inference layout left None reads as the training one.
  actor = plan.role("actor")
  explicit = plan.replace(roles=tuple(
      cm.RolePlan(r.role, r.pool, train=r.train, infer=r.infer_layout) for r in plan.roles))
  assert actor is not None and export.plan_settings(explicit) == export.plan_settings(plan)
  del job, cluster


def test_verl_example_script_overrides():
  job, plan, cluster = export.read_config("verl", EXAMPLE, response_mean=1000)
  # Qwen/Qwen3-8B names the preset; 1024 prompts in mini-batches of 256; rollout.n=5.
  assert job.actor == cm.models.get("qwen3-8b")
  assert (job.algorithm, float(job.prompts_per_step), float(job.samples_per_prompt)) == (
      "grpo", 1024.0, 5.0)
  assert (job.mini_batches, job.ppo_epochs, float(job.prompt_len)) == (4, 1, 1024.0)
  assert float(job.response.max) == 2048.0 and abs(float(job.response.mean) - 1000.0) < 1e-3
  assert job.use_reference  # use_kl_loss=True
  assert (cluster.nodes, cluster.gpus_per_node, cluster.accelerator.name) == (1, 8, "H100")
  assert [(p.name, float(p.gpus)) for p in plan.pools] == [("all", 8.0)]
  actor, ref = plan.role("actor"), plan.role("reference")
  # use_dynamic_bsz: 24576 tokens / (1024 + 1000) = 12 sequences; 256 x 5 / 8 ranks = 160
  # samples per rank, and the largest micro-batch <= 12 dividing 160 is 10.
  assert float(actor.train.micro_batch) == 10.0
  assert float(actor.infer.micro_batch) == 12.0 and float(ref.infer.micro_batch) == 12.0
  assert float(ref.infer.offload) == 1.0 and float(actor.train.offload) == 0.0
  assert (float(actor.train.zero_stage), float(actor.train.recompute)) == (3.0, 2.0)
  e = plan.engine
  assert (float(e.tp), float(e.memory_fraction), float(e.max_seqs), e.prefix_caching) == (
      2.0, 0.6, 256.0, True)
  assert plan.mode == cm.Mode()


def test_verl_sources_read_alike(tmp_path):
  _, job, plan, cluster = next(g for g in grid.GRID if g[0] == "grpo/megatron/colocated")
  o = export.to_verl(plan, job, cluster, strategy="megatron")
  words = [f"{k}={v}" for k, v in o.items()]
  text = tmp_path / "overrides.txt"
  text.write_text("# overrides\n" + "\n".join(words) + "\n")
  script = tmp_path / "run.sh"
  command = export.get("verl").render(o).replace(
      "tensor_model_parallel_size=2", "tensor_model_parallel_size=${TP}", 1)
  script.write_text("set -x\nTP=2\n" + command.replace(" ", " \\\n  "))
  nested: dict = {}
  for k, v in o.items():
    d = nested
    *head, last = k.split(".")
    for h in head:
      d = d.setdefault(h, {})
    d[last] = v
  cfg = tmp_path / "config.yaml"
  cfg.write_text(yaml.safe_dump(nested))
  kw = _given(job, plan)
  want = export.plan_settings(plan)
  for source in (o, words, str(text), str(script), str(cfg)):
    assert export.plan_settings(export.read_config("verl", source, **kw).plan) == want, source


def test_openrlhf_command_file_reads_like_its_argv(tmp_path):
  for name, job, plan, cluster in grid.GRID:
    plan = grid.for_framework("openrlhf", plan)
    try:
      argv = export.to_openrlhf(plan, job, cluster, vllm_default_max_seqs=True)
    except ValueError:
      continue
    path = tmp_path / "train.sh"
    path.write_text(export.get("openrlhf").render(argv))
    a = export.read_config("openrlhf", argv, **_given(job, plan))
    b = export.read_config("openrlhf", str(path), **_given(job, plan))
    assert export.plan_settings(a.plan) == export.plan_settings(b.plan), name
    return
  pytest.fail("no plan of the grid exports to OpenRLHF")


def test_nemo_rl_yaml_file_and_dapo_oversample(tmp_path):
  for name, job, plan, cluster in grid.GRID:
    if job.algorithm != "dapo":
      continue
    plan = grid.for_framework("nemo_rl", plan)
    try:
      cfg = export.to_nemo_rl(plan, job, cluster)
    except ValueError:
      continue
    path = tmp_path / "dapo.yaml"
    path.write_text(export.to_yaml(cfg))
    kw = _given(job, plan)
    back = export.read_config("nemo_rl", str(path), **kw)
    # grpo.batch_multiplier is DAPO's oversampling: no keyword needed.
    assert float(back.job.oversample) == pytest.approx(1.5)
    assert export.plan_settings(back.plan) == export.plan_settings(plan), name
    return
  pytest.fail("no DAPO plan of the grid exports to NeMo-RL")


def _first(framework, match=lambda name, job: True):
  for name, job, plan, cluster in grid.GRID:
    plan = grid.for_framework(framework, plan)
    if not match(name, job):
      continue
    try:
      return name, job, plan, cluster, export.get(framework).to_config(plan, job, cluster)
    except ValueError:
      continue
  pytest.fail(f"no plan of the grid exports to {framework}")


def test_slime_launch_script_reads_like_its_settings(tmp_path):
  name, job, plan, cluster, settings = _first("slime", lambda n, j: "async1" in n)
  assert settings["script"] == "train_async.py"
  script = tmp_path / "run.sh"
  script.write_text("#!/bin/bash\nset -ex\n" + export.get("slime").render(settings).replace(
      " --", " \\\n  --"))
  a = export.read_config("slime", settings, **_given(job, plan))
  b = export.read_config("slime", str(script), **_given(job, plan))
  assert export.plan_settings(a.plan) == export.plan_settings(b.plan), name
  assert b.plan.mode.staleness == 1  # train_async.py: one step off-policy
  assert [(p.name, float(p.gpus)) for p in b.plan.pools] == [("gen", 8.0), ("train", 8.0)]
  # The reference's weights live in host memory between its passes (tensor_backper.py).
  assert float(b.plan.role("reference").infer.swap) == 1.0
  words = ["python3", "train.py", *settings["argv"]]
  assert export.read_config("slime", words, **_given(job, plan)).plan.mode.staleness == 0


def test_slime_import_names_what_the_flags_lack():
  _, job, plan, _, settings = _first("slime")
  argv = settings["argv"]
  i = argv.index("--rollout-batch-size")
  with pytest.raises(ValueError, match="rollout-batch-size is not set and has no default"):
    export.read_config("slime", {**settings, "argv": argv[:i] + argv[i + 2:]},
                       **_given(job, plan))
  with pytest.raises(ValueError, match="response_mean"):
    export.read_config("slime", settings, model=job.actor)


def test_areal_yaml_file_and_dapo_keep_rate(tmp_path):
  name, job, plan, cluster, cfg = _first("areal", lambda n, j: j.algorithm == "dapo")
  path = tmp_path / "dapo.yaml"
  path.write_text(export.to_yaml(cfg))
  kw = _given(job, plan)
  back = export.read_config("areal", str(path), **kw)
  assert export.plan_settings(back.plan, export.unexpressed("areal")) == export.plan_settings(
      plan, export.unexpressed("areal")), name
  # 192 groups a step at a keep rate of 1 / 1.5: 128 prompts.
  assert float(back.job.prompts_per_step) == 128.0 and float(back.job.oversample) == 1.5
  del kw["oversample"]
  # no config states the keep rate: every group is taken as kept, and the import says so
  kept = export.read_config("areal", str(path), **kw)
  assert float(kept.job.prompts_per_step) == 192.0 and float(kept.job.oversample) == 1.0
  assert any("oversample=" in n for n in kept.not_modelled)


def test_openrlhf_adam_offload_round_trip():
  job = cm.RLJob("ppo", cm.models.get("qwen2.5-7b"), prompts_per_step=256, samples_per_prompt=1,
                 prompt_len=512, response=cm.ResponseLength.from_mean_max(500.0, 1024.0),
                 mini_batches=4)
  p = cm.Parallel(zero_stage=2, micro_batch=2, offload=1)
  pools = (cm.Pool("gen", 8.0), cm.Pool("train", 4.0), cm.Pool("critic", 4.0))
  roles = (cm.RolePlan("actor", "train", train=p), cm.RolePlan("reference", "train", infer=p),
           cm.RolePlan("critic", "critic", train=p))
  plan = cm.Plan(pools=pools, roles=roles, engine=cm.Engine(tp=4, max_seqs=256.0),
                 rollout_pool="gen")
  argv = export.to_openrlhf(plan, job, cm.Cluster("H100", 8, 2), vllm_default_max_seqs=True)
  assert "--ds.adam_offload" in argv and "--ref.offload" in argv
  back = export.read_config("openrlhf", argv, **{**_given(job, plan), "response_mean": 500.0})
  u = export.unexpressed("openrlhf")
  assert export.plan_settings(back.plan, u) == export.plan_settings(plan, u)
  assert float(back.plan.role("actor").train.offload) == 1.0
