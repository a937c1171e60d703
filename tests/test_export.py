"""Exports of plans to veRL, OpenRLHF and NeMo-RL settings.

Expected settings are written out by hand from the frameworks' configuration
keys (veRL's trainer YAML files, OpenRLHF's train_ppo_ray.py flags, NeMo-RL's
grpo_math_1B.yaml); refusals must name the setting at fault.
"""

import dataclasses
import shlex

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_export_frameworks as grid
import yaml

import costmodel as cm
import export

QWEN7B = cm.models.get("qwen2.5-7b")
MOE = cm.models.get("qwen3-30b-a3b")
ONE_NODE = cm.Cluster("H100", 8, 1)
TWO_NODES = cm.Cluster("H100", 8, 2)


def grpo_job(**kw):
  args = dict(prompts_per_step=128, samples_per_prompt=8, prompt_len=1024,
              response=cm.ResponseLength.from_mean_max(2000.0, 4096.0), mini_batches=4)
  args.update(kw)
  return cm.RLJob("grpo", QWEN7B, **args)


def ppo_job(**kw):
  args = dict(prompts_per_step=256, samples_per_prompt=1, prompt_len=512,
              response=cm.ResponseLength.from_mean_max(500.0, 1024.0), mini_batches=4,
              ppo_epochs=2)
  args.update(kw)
  return cm.RLJob("ppo", QWEN7B, **args)


def colocated_grpo():
  job = grpo_job()
  plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(cp=2, micro_batch=2),
                           engine=cm.Engine(tp=2, memory_fraction=0.6, max_seqs=256))
  return plan, job, ONE_NODE


def split_async_grpo(staleness=2, partial=True):
  job = grpo_job()
  plan = cm.Plan.split(job, TWO_NODES, gen_gpus=8, train=cm.Parallel(micro_batch=4),
                       engine=cm.Engine(tp=4, memory_fraction=0.8, max_seqs=512),
                       mode=cm.Mode(staleness=staleness, partial_rollout=partial))
  return plan, job, TWO_NODES


def critic_apart_ppo():
  """PPO with the actor, reference and engines on one node and the critic on
  a second (a placement the named families do not hold)."""
  pools = (cm.Pool("main", 8.0), cm.Pool("critic", 8.0))
  p = cm.Parallel(micro_batch=1)
  roles = (cm.RolePlan("actor", "main", train=p), cm.RolePlan("reference", "main", infer=p),
           cm.RolePlan("critic", "critic", train=p))
  plan = cm.Plan(pools=pools, roles=roles, engine=cm.Engine(tp=2), rollout_pool="main")
  return plan, ppo_job(), TWO_NODES


def to_openrlhf(*args, **kw):
  """OpenRLHF export letting vLLM pick max_num_seqs (OpenRLHF has no flag for it)."""
  return export.to_openrlhf(*args, vllm_default_max_seqs=True, **kw)


def with_roles(plan, ref=None, swap=False, backend=None):
  """``plan`` with the reference's inference layout changed by ``ref`` (veRL's FSDP
  reference keeps its parameters on the host: ``offload=1``), with ``swap`` the actor's and
  critic's state swapped to the host between steps, and the engine's weight sync ``backend``."""
  plan = grid.with_roles(plan, ref, swap)
  if backend:
    plan = plan.replace(engine=plan.engine.replace(sync_backend=backend))
  return plan


HOST_REF = {"offload": 1.0}


def refusal(fn, *match):
  with pytest.raises(ValueError) as info:
    fn()
  for m in match:
    assert m in str(info.value), f"{m!r} not in: {info.value}"
  return str(info.value)


# ----- veRL -------------------------------------------------------------------


def test_verl_colocated_grpo_fsdp_v1():
  plan, job, cluster = colocated_grpo()
  plan = with_roles(plan, HOST_REF)
  expected = {
      "trainer.nnodes": 1, "trainer.n_gpus_per_node": 8,
      "data.train_batch_size": 128, "data.max_prompt_length": 1024,
      "data.max_response_length": 4096, "algorithm.adv_estimator": "grpo",
      "actor_rollout_ref.actor.use_kl_loss": True,
      "actor_rollout_ref.actor.strategy": "fsdp",
      # 128 prompts / 4 mini-batches, counted in prompts (veRL multiplies by n)
      "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
      "actor_rollout_ref.actor.ppo_epochs": 1,
      "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2,
      "actor_rollout_ref.actor.fsdp_config.param_offload": False,
      "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
      "actor_rollout_ref.model.enable_gradient_checkpointing": True,
      "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 2,
      "actor_rollout_ref.ref.ulysses_sequence_parallel_size": 2,
      "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.n": 8,
      "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
      "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
      "actor_rollout_ref.rollout.max_num_seqs": 256,
      "actor_rollout_ref.rollout.enable_prefix_caching": True,
      "actor_rollout_ref.rollout.enforce_eager": False,  # the plan decodes with CUDA graphs
      "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 2,
      "trainer.use_v1": True, "trainer.v1.trainer_mode": "sync",
  }
  assert export.to_verl(plan, job, cluster) == expected
  legacy = export.to_verl(plan, job, cluster, version="legacy")
  assert legacy["actor_rollout_ref.hybrid_engine"] is True
  # trainer.use_v1 defaults to True at 1dda039, so the hybrid-engine trainer says False.
  assert legacy["trainer.use_v1"] is False
  assert not any(k.startswith("trainer.v1") for k in legacy)


def test_verl_split_async_legacy_fully_async():
  plan, job, cluster = split_async_grpo(staleness=2)
  plan = with_roles(plan, HOST_REF, backend="bucketed")
  o = export.to_verl(plan, job, cluster, version="legacy")
  placement = {k: v for k, v in o.items()
               if k.startswith(("trainer.", "rollout.", "async_training.", "actor_rollout_ref.hy",
                                "data.train_batch", "data.gen"))}
  assert placement == {
      "trainer.nnodes": 1, "trainer.n_gpus_per_node": 8, "trainer.use_v1": False,
      "actor_rollout_ref.hybrid_engine": False,
      # fully_async_rollouter.py asserts train_batch_size == 0 and gen_batch_size == 1;
      # total_rollout_steps null runs the whole dataset instead of the recipe's 100 samples.
      "data.train_batch_size": 0, "data.gen_batch_size": 1,
      "rollout.nnodes": 1, "rollout.n_gpus_per_node": 8,
      "rollout.total_rollout_steps": None,
      "async_training.staleness_threshold": 2.0,
      # No streaming: one trainer call takes the step's 4 mini-batches (128 / 32 prompts).
      "async_training.trigger_parameter_sync_step": 1,
      "async_training.require_batches": 4,
      "async_training.partial_rollout": True,
  }
  assert o["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 4
  assert o["actor_rollout_ref.rollout.max_num_seqs"] == 512
  assert o["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.8
  cmd = export.verl_command(o)
  assert cmd.startswith("python3 -m verl.experimental.fully_async_policy.fully_async_main ")
  assert " rollout.total_rollout_steps=null " in cmd


def test_verl_split_async_v1_separate_async():
  plan, job, cluster = split_async_grpo(staleness=2)
  plan = with_roles(plan, HOST_REF, backend="bucketed")
  o = export.to_verl(plan, job, cluster, version="v1")
  v1 = {k: v for k, v in o.items() if k.startswith(("trainer.", "actor_rollout_ref.rollout.nn",
                                                     "actor_rollout_ref.rollout.n_gpus",
                                                     "actor_rollout_ref.rollout.checkpoint"))}
  assert v1 == {
      "trainer.nnodes": 1, "trainer.n_gpus_per_node": 8, "trainer.use_v1": True,
      "trainer.v1.trainer_mode": "separate_async",
      "actor_rollout_ref.rollout.nnodes": 1, "actor_rollout_ref.rollout.n_gpus_per_node": 8,
      "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
      # data.train_batch_size (128) = parameter_sync_step x ppo_mini_batch_size (32)
      "trainer.v1.separate_async.parameter_sync_step": 4,
      # staleness 2: replay_buffer.py drops a trajectory when g - s + 1 > threshold
      "trainer.v1.sampler.max_off_policy_threshold": 3,
      "trainer.v1.sampler.max_off_policy_strategy": "wait",
  }
  assert (o["data.train_batch_size"] == o["trainer.v1.separate_async.parameter_sync_step"]
          * o["actor_rollout_ref.actor.ppo_mini_batch_size"])
  assert "actor_rollout_ref.hybrid_engine" not in o
  assert export.verl_command(o).startswith("python3 -m verl.trainer.main_ppo trainer.nnodes=1 ")


def test_verl_split_one_step_off_recipe():
  plan, job, cluster = split_async_grpo(staleness=1, partial=False)
  plan = with_roles(plan, HOST_REF, backend="bucketed")
  o = export.to_verl(plan, job, cluster, version="legacy", async_recipe="one_step_off")
  assert o["rollout.n_gpus_per_node"] == 8 and o["actor_rollout_ref.hybrid_engine"] is False
  assert not any(k.startswith("async_training.") for k in o)
  assert export.verl_command(o).startswith("python3 -m verl.experimental.one_step_off_policy.")


def test_verl_striped_pools_over_two_nodes():
  # 4 + 12 GPUs on two 8-GPU nodes: training takes 6 GPUs of each node, the
  # rollout the other 2 of each (a uniform n_gpus_per_node for both pools).
  job = grpo_job(prompts_per_step=96)  # 96 x 8 / 4 = 192 samples per mini-batch, 16 per rank
  plan = cm.Plan.split(job, TWO_NODES, gen_gpus=4, train=cm.Parallel(micro_batch=1),
                       engine=cm.Engine(tp=2), mode=cm.Mode(staleness=1, partial_rollout=True))
  o = export.to_verl(with_roles(plan, HOST_REF, backend="bucketed"), job, TWO_NODES,
                     version="legacy")
  assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == (2, 6)
  assert (o["rollout.nnodes"], o["rollout.n_gpus_per_node"]) == (2, 2)


def test_verl_megatron_ppo_with_critic():
  job = ppo_job()
  plan = cm.Plan.colocated(
      job, TWO_NODES,
      train=cm.Parallel(tp=2, pp=2, micro_batch=1, zero_stage=1, recompute="selective"),
      critic=cm.Parallel(tp=4, micro_batch=2, zero_stage=1),
      engine=cm.Engine(tp=4, memory_fraction=0.5, max_seqs=128))
  o = export.to_verl(plan, job, TWO_NODES, strategy="megatron", version="legacy")
  a = "actor_rollout_ref.actor"
  expected_actor = {
      f"{a}.strategy": "megatron", f"{a}.ppo_mini_batch_size": 64, f"{a}.ppo_epochs": 2,
      f"{a}.ppo_micro_batch_size_per_gpu": 1,
      f"{a}.megatron.tensor_model_parallel_size": 2,
      f"{a}.megatron.pipeline_model_parallel_size": 2,
      f"{a}.megatron.context_parallel_size": 1, f"{a}.megatron.expert_model_parallel_size": 1,
      f"{a}.megatron.sequence_parallel": True, f"{a}.megatron.use_distributed_optimizer": True,
      f"{a}.megatron.param_offload": False, f"{a}.megatron.grad_offload": False,
      f"{a}.megatron.optimizer_offload": False,
      f"{a}.megatron.override_transformer_config.recompute_granularity": "selective",
  }
  assert {k: v for k, v in o.items() if k.startswith(f"{a}.") and "kl" not in k} == expected_actor
  # The Megatron critic has no forward_micro_batch_size_per_gpu (values use the training one).
  expected_critic = {
      "critic.strategy": "megatron", "critic.ppo_micro_batch_size_per_gpu": 2,
      "critic.megatron.tensor_model_parallel_size": 4,
      "critic.megatron.pipeline_model_parallel_size": 1,
      "critic.megatron.context_parallel_size": 1, "critic.megatron.expert_model_parallel_size": 1,
      "critic.megatron.sequence_parallel": True, "critic.megatron.use_distributed_optimizer": True,
      "critic.megatron.param_offload": False, "critic.megatron.grad_offload": False,
      "critic.megatron.optimizer_offload": False,
      "critic.megatron.override_transformer_config.recompute_granularity": "full",
      "critic.megatron.override_transformer_config.recompute_method": "uniform",
      "critic.megatron.override_transformer_config.recompute_num_layers": 1,
  }
  assert {k: v for k, v in o.items() if k.startswith("critic.")} == expected_critic
  assert o["algorithm.adv_estimator"] == "gae"
  assert (o["trainer.nnodes"], o["trainer.n_gpus_per_node"]) == (2, 8)
  # The reference inherits nothing implicitly: its layout is written out.
  assert o["actor_rollout_ref.ref.megatron.tensor_model_parallel_size"] == 2
  assert o["actor_rollout_ref.ref.megatron.pipeline_model_parallel_size"] == 2
  assert "--config-name=ppo_megatron_trainer" in export.verl_command(o)


def test_verl_megatron_moe_keys():
  job = cm.RLJob("grpo", MOE, prompts_per_step=64, samples_per_prompt=8, prompt_len=1024,
                 response=cm.ResponseLength.from_mean_max(1500.0, 4096.0), mini_batches=2)
  train = cm.Parallel(tp=2, pp=2, vpp=2, ep=4, micro_batch=1, zero_stage=0)
  plan = cm.Plan.colocated(job, TWO_NODES, train=train, engine=cm.Engine(tp=4, ep=4))
  o = export.to_verl(plan, job, TWO_NODES, strategy="megatron")
  m = "actor_rollout_ref.actor.megatron"
  assert {k[len(m) + 1:]: v for k, v in o.items() if k.startswith(m + ".")
          and "override" not in k} == {
      "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
      "virtual_pipeline_model_parallel_size": 2, "context_parallel_size": 1,
      "expert_model_parallel_size": 4, "sequence_parallel": True,
      # veRL's null default means ETP = TP in Megatron; the model's experts are not TP-split.
      "expert_tensor_parallel_size": 1,
      "use_distributed_optimizer": False, "param_offload": False, "grad_offload": False,
      "optimizer_offload": False}
  assert o[f"{m}.override_transformer_config.recompute_granularity"] == "full"
  assert o["actor_rollout_ref.rollout.expert_parallel_size"] == 4
  assert o["actor_rollout_ref.ref.megatron.expert_model_parallel_size"] == 4
  assert o["actor_rollout_ref.ref.megatron.virtual_pipeline_model_parallel_size"] == 2


def test_verl_reward_model_own_pool():
  job = grpo_job(reward_model=cm.models.get("qwen2.5-1.5b"))
  pools = (cm.Pool("main", 8.0), cm.Pool("rm", 8.0))
  p = cm.Parallel(micro_batch=2)
  ref = cm.RolePlan("reference", "main", infer=p.replace(offload=1))
  roles = (cm.RolePlan("actor", "main", train=p), ref,
           cm.RolePlan("reward", "rm", infer=cm.Parallel(micro_batch=8, swap=1)))
  plan = cm.Plan(pools=pools, roles=roles, engine=cm.Engine(tp=2), rollout_pool="main")
  o = export.to_verl(plan, job, TWO_NODES)
  # At 1dda039 the reward model is served by a rollout engine under reward.reward_model.
  assert {k: v for k, v in o.items() if k.startswith("reward")} == {
      "reward.reward_model.enable": True, "reward.reward_model.enable_resource_pool": True,
      "reward.reward_model.nnodes": 1, "reward.reward_model.n_gpus_per_node": 8,
      "reward.reward_model.rollout.name": "vllm",
      "reward.reward_model.rollout.tensor_model_parallel_size": 1,
      "reward.reward_model.rollout.pipeline_model_parallel_size": 1,
      "reward.reward_model.rollout.free_cache_engine": True}
  # A reward model on the actor's pool: colocated, refused by the asynchronous trainers.
  shared = plan.replace(roles=plan.roles[:2] + (cm.RolePlan("reward", "main", infer=p),),
                        pools=(cm.Pool("main", 8.0),))
  assert export.to_verl(shared, job, ONE_NODE)["reward.reward_model.enable_resource_pool"] is False


def test_verl_dapo_and_kl_keys():
  job = cm.RLJob("dapo", QWEN7B, prompts_per_step=64, samples_per_prompt=8, oversample=1.5)
  plan = cm.Plan.colocated(job, ONE_NODE, engine=cm.Engine(tp=2))
  o = export.to_verl(plan, job, ONE_NODE)
  assert o["algorithm.adv_estimator"] == "grpo"
  assert o["algorithm.filter_groups.enable"] is True
  # The v1 trainer needs the metric; it streams groups (gen_batch_size 1) and refills.
  assert o["algorithm.filter_groups.metric"] == "acc"
  assert "data.gen_batch_size" not in o
  # The hybrid-engine trainer does not read filter_groups.
  refusal(lambda: export.to_verl(plan, job, ONE_NODE, version="legacy"), "algorithm='dapo'",
          "filter_groups")
  assert o["actor_rollout_ref.actor.use_kl_loss"] is False
  assert o["algorithm.use_kl_in_reward"] is False
  assert not any(k.startswith("actor_rollout_ref.ref.") for k in o)


# ----- OpenRLHF ----------------------------------------------------------------


def test_openrlhf_colocated_grpo_dotted():
  plan, job, cluster = colocated_grpo()
  plan = with_roles(plan, swap=True, backend="ipc")
  expected = [
      "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "8",
      "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "8",
      "--vllm.num_engines", "4", "--vllm.tensor_parallel_size", "2",
      "--vllm.gpu_memory_utilization", "0.6", "--vllm.enable_prefix_caching",
      "--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep",
      "--ds.zero_stage", "3", "--ds.tensor_parallel_size", "1", "--ds.ring_attn_size", "2",
      "--ds.packing_samples", "--actor.gradient_checkpointing_enable",
      "--rollout.batch_size", "128", "--rollout.n_samples_per_prompt", "8",
      "--rollout.micro_batch_size", "2",
      "--train.batch_size", "256",  # 128 x 8 samples / 4 mini-batches
      "--train.micro_batch_size", "2", "--train.max_epochs", "1",
      "--data.max_len", "5120", "--rollout.max_new_tokens", "4096",
      "--algo.advantage.estimator", "group_norm",
  ]
  argv = to_openrlhf(plan, job, cluster)
  assert argv == expected
  # Without swap the DeepSpeed states stay on the GPUs (no --ds.enable_sleep).
  resident = to_openrlhf(with_roles(colocated_grpo()[0], backend="ipc"), job, cluster)
  assert resident == [a for a in expected if a != "--ds.enable_sleep"]
  # colocate_all (sync): actor GPUs == vllm engines x vllm TP
  assert 8 == int(argv[argv.index("--vllm.num_engines") + 1]) * int(
      argv[argv.index("--vllm.tensor_parallel_size") + 1])


def test_openrlhf_split_async():
  plan, job, cluster = split_async_grpo(staleness=2)
  expected = [
      "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "8",
      "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "8",
      "--vllm.num_engines", "2", "--vllm.tensor_parallel_size", "4",
      "--vllm.gpu_memory_utilization", "0.8", "--vllm.enable_prefix_caching",
      "--train.colocate_actor_ref",
      "--ds.zero_stage", "3", "--ds.tensor_parallel_size", "1", "--ds.ring_attn_size", "1",
      "--actor.gradient_checkpointing_enable",
      "--rollout.batch_size", "128", "--rollout.n_samples_per_prompt", "8",
      "--rollout.micro_batch_size", "4", "--train.batch_size", "256",
      "--train.micro_batch_size", "4", "--train.max_epochs", "1",
      "--data.max_len", "5120", "--rollout.max_new_tokens", "4096",
      "--algo.advantage.estimator", "group_norm",
      "--train.async_enable", "--train.async_queue_size", "2", "--train.partial_rollout_enable",
  ]
  assert to_openrlhf(plan, job, cluster) == expected
  # v0.11.0 has no flag for vLLM's max_num_seqs: refused unless vLLM may choose it.
  refusal(lambda: export.to_openrlhf(plan, job, cluster), "engine.max_seqs=512",
          "vllm_default_max_seqs")


def test_openrlhf_autotp_zero3_and_dapo_oversampling():
  job = grpo_job()
  plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(tp=2, zero_stage=3),
                           engine=cm.Engine(tp=2, sync_backend="ipc"))
  refusal(lambda: to_openrlhf(plan, job, ONE_NODE), "zero_stage=3", "AutoTP", "0-2")
  ok = to_openrlhf(plan.replace(roles=tuple(
      dataclasses.replace(r, train=cm.Parallel(tp=2, zero_stage=2)) if r.role == "actor" else
      dataclasses.replace(r, infer=cm.Parallel(tp=2, zero_stage=2)) for r in plan.roles)),
      job, ONE_NODE)
  assert ok[ok.index("--ds.tensor_parallel_size") + 1] == "2"
  dapo = cm.RLJob("dapo", QWEN7B, prompts_per_step=64, samples_per_prompt=8, oversample=1.5)
  sync = cm.Plan.colocated(dapo, ONE_NODE, engine=cm.Engine(tp=2, sync_backend="ipc"))
  refusal(lambda: to_openrlhf(sync, dapo, ONE_NODE), "job.oversample=1.5",
          "--train.async_enable")
  asyn = cm.Plan.split(dapo, ONE_NODE, gen_gpus=4, engine=cm.Engine(tp=2),
                       mode=cm.Mode(staleness=1))
  argv = to_openrlhf(asyn, dapo, ONE_NODE)
  assert argv[argv.index("--rollout.vllm_generate_batch_size") + 1] == "96"  # ceil(64 x 1.5)
  assert "--algo.dynamic_filtering_enable" in argv


def test_openrlhf_ppo_with_critic_on_its_own_pool():
  job = ppo_job(ppo_epochs=1)
  p = cm.Parallel(zero_stage=2, micro_batch=2, offload=1)
  pools = (cm.Pool("gen", 8.0), cm.Pool("actor", 4.0), cm.Pool("critic", 4.0))
  roles = (cm.RolePlan("actor", "actor", train=p), cm.RolePlan("reference", "actor", infer=p),
           cm.RolePlan("critic", "critic", train=p))
  plan = cm.Plan(pools=pools, roles=roles, engine=cm.Engine(tp=4), rollout_pool="gen")
  argv = to_openrlhf(plan, job, TWO_NODES)
  placement = argv[:argv.index("--vllm.num_engines")]
  assert placement == ["--actor.num_nodes", "1", "--actor.num_gpus_per_node", "4",
                       "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "4",
                       "--critic.num_nodes", "1", "--critic.num_gpus_per_node", "4"]
  assert argv[argv.index("--algo.advantage.estimator") + 1] == "gae"
  assert argv[argv.index("--ds.zero_stage") + 1] == "2"
  assert "--ds.adam_offload" in argv and "--train.colocate_actor_ref" in argv
  assert "--train.colocate_all" not in argv and "--train.async_enable" not in argv
  assert argv[argv.index("--train.batch_size") + 1] == "64"  # 256 x 1 / 4


def test_openrlhf_ppo_critic_on_actor_pool_needs_async():
  job = ppo_job(ppo_epochs=1)
  sync = cm.Plan.split(job, TWO_NODES, gen_gpus=8, train=cm.Parallel(micro_batch=2),
                       engine=cm.Engine(tp=2))
  refusal(lambda: to_openrlhf(sync, job, TWO_NODES), "colocate_all", "synchronous")
  asyn = sync.replace(mode=cm.Mode(staleness=1))
  argv = to_openrlhf(asyn, job, TWO_NODES)
  assert "--train.colocate_all" in argv and "--train.async_enable" in argv
  assert "--vllm.enable_sleep" not in argv  # async: only the DeepSpeed models share GPUs


# ----- NeMo-RL -------------------------------------------------------------------


def test_nemo_rl_colocated_grpo():
  plan, job, cluster = colocated_grpo()
  plan = with_roles(plan, swap=True, backend="ipc")  # colocated refit: CUDA IPC, state swapped
  expected = {
      "defaults": "grpo_math_1B.yaml",  # the snippet extends NeMo-RL's example config
      "cluster": {"num_nodes": 1, "gpus_per_node": 8},
      "grpo": {"num_prompts_per_step": 128, "num_generations_per_prompt": 8,
               "normalize_rewards": True, "use_leave_one_out_baseline": False,
               "async_grpo": {"enabled": False}},
      "policy": {
          "train_global_batch_size": 256, "train_micro_batch_size": 2,
          "logprob_batch_size": 2, "max_total_sequence_length": 5120,
          "dtensor_cfg": {"enabled": True, "tensor_parallel_size": 1,
                          "context_parallel_size": 2, "sequence_parallel": False,
                          "activation_checkpointing": True, "cpu_offload": False},
          "megatron_cfg": {"enabled": False},
          # context parallelism on DTensor runs without sequence packing
          "sequence_packing": {"enabled": False},
          "generation": {
              "backend": "vllm", "max_new_tokens": 4096,
              # vllm_worker.py passes enable_prefix_caching to vLLM itself, read from vllm_cfg;
              # in vllm_kwargs it would be a duplicate keyword.
              "vllm_cfg": {"tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                           "expert_parallel_size": 1, "gpu_memory_utilization": 0.6,
                           "async_engine": False, "enable_prefix_caching": True,
                           "enforce_eager": False},
              "vllm_kwargs": {"max_num_seqs": 256},
              "colocated": {"enabled": True}}},
  }
  assert export.to_nemo_rl(plan, job, cluster) == expected
  # The policy's state goes to the host around colocated generation: swap 0 has no setting.
  refusal(lambda: export.to_nemo_rl(colocated_grpo()[0].replace(engine=plan.engine), job,
                                    cluster), "actor.train.swap=0", "use swap=1")


def test_nemo_rl_split_async_grpo():
  plan, job, cluster = split_async_grpo(staleness=2)
  plan = with_roles(plan, backend="bucketed")
  d = export.to_nemo_rl(plan, job, cluster)
  assert d["cluster"] == {"num_nodes": 2, "gpus_per_node": 8}
  assert d["policy"]["generation"]["colocated"] == {
      "enabled": False, "resources": {"num_nodes": 1, "gpus_per_node": 8}}
  assert d["grpo"]["async_grpo"] == {"enabled": True, "max_trajectory_age_steps": 2,
                                     "in_flight_weight_updates": True}
  assert d["loss_fn"] == {"use_importance_sampling_correction": True}
  assert d["policy"]["generation"]["vllm_cfg"]["async_engine"] is True
  assert d["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == 4


def test_nemo_rl_single_node_split_and_megatron():
  job = grpo_job()
  train = cm.Parallel(tp=2, pp=2, micro_batch=1, zero_stage=1)
  engine = cm.Engine(tp=2, sync_backend="bucketed")
  plan = cm.Plan.split(job, ONE_NODE, gen_gpus=4, train=train, engine=engine)
  d = export.to_nemo_rl(plan, job, ONE_NODE)
  # One node: generation takes gpus_per_node of it, training the rest.
  assert d["cluster"] == {"num_nodes": 1, "gpus_per_node": 8}
  assert d["policy"]["generation"]["colocated"]["resources"] == {"num_nodes": 1,
                                                                 "gpus_per_node": 4}
  assert d["policy"]["dtensor_cfg"] == {"enabled": False}
  assert d["defaults"] == "grpo_math_1B_megatron.yaml"
  assert d["policy"]["megatron_cfg"] == {
      "enabled": True, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
      "context_parallel_size": 1, "expert_model_parallel_size": 1,
      "expert_tensor_parallel_size": 1, "sequence_parallel": True,
      "activation_checkpointing": True, "recompute_granularity": "full",
      "optimizer": {"use_distributed_optimizer": True}}
  # ZeRO-2/3 on Megatron would silently run as ZeRO-1 (use_custom_fsdp is never read).
  zero2 = cm.Plan.split(job, ONE_NODE, gen_gpus=4, train=train.replace(zero_stage=2),
                        engine=engine)
  refusal(lambda: export.to_nemo_rl(zero2, job, ONE_NODE), "zero_stage=2", "use_custom_fsdp")
  # Optimizer offload is expressible on Megatron (with the distributed optimizer).
  off = cm.Plan.split(job, ONE_NODE, gen_gpus=4, train=train.replace(offload=1),
                      engine=engine)
  assert export.to_nemo_rl(off, job, ONE_NODE)["policy"]["megatron_cfg"]["optimizer"] == {
      "use_distributed_optimizer": True, "optimizer_cpu_offload": True,
      "optimizer_offload_fraction": 1.0}


def test_to_yaml_reads_back_and_keeps_order():
  d = {"cluster": {"num_nodes": 2, "gpus_per_node": 8},
       "policy": {"model_name": "Qwen/Qwen2.5-7B", "flag": True, "ratio": 0.6, "none": None,
                  "empty": {}, "sizes": [1, 2], "tricky": ["true", "1e3", "a b", "", "no"]}}
  text = export.to_yaml(d)
  assert yaml.safe_load(text) == d  # strings YAML would read as bools or numbers are quoted
  assert text.startswith("cluster:\n  num_nodes: 2\n  gpus_per_node: 8\npolicy:\n")
  plan, job, cluster = colocated_grpo()
  text = export.to_yaml(export.to_nemo_rl(with_roles(plan, swap=True, backend="ipc"), job,
                                          cluster))
  assert "    colocated:\n      enabled: true\n" in text


def test_registry_names_each_framework_and_its_version():
  assert export.FRAMEWORKS == ("verl", "openrlhf", "nemo_rl", "slime", "areal")
  plan, job, cluster = colocated_grpo()
  plan = plan.replace(engine=cm.Engine(tp=1, memory_fraction=0.6, max_seqs=256))
  options = {"openrlhf": {"vllm_default_max_seqs": True}}
  zero1 = plan.replace(roles=tuple(dataclasses.replace(
      r, train=r.train and cm.Parallel(cp=2, micro_batch=2, zero_stage=1),
      infer=cm.Parallel(cp=2, micro_batch=2, zero_stage=1)) for r in plan.roles))
  # Each framework's colocated run: its weight sync, where it keeps the reference's weights
  # and whether the trainer's state leaves the GPUs while the engines generate.
  plans = {"verl": with_roles(plan, HOST_REF), "openrlhf": with_roles(plan, backend="ipc"),
           "nemo_rl": with_roles(plan, swap=True, backend="ipc"),
           "slime": with_roles(zero1, {"swap": 1.0}, swap=True, backend="ipc"),
           "areal": with_roles(plan, swap=True, backend="bucketed")}
  for name in export.FRAMEWORKS:
    e = export.get(name)
    assert e.name == name and "@" in e.version
    opts = options.get(name, {})
    p = plans[name]
    text = e.export(p, job, cluster, **opts)
    assert text.splitlines()[0] == e.header() and e.version in text.splitlines()[0]
    assert text == e.render(e.to_config(p, job, cluster, **opts))
  assert export.get("verl").to_config(plans["verl"], job, cluster) == export.to_verl(
      plans["verl"], job, cluster)
  body = export.get("nemo_rl").export(plans["nemo_rl"], job, cluster).split("\n", 1)[1]
  assert yaml.safe_load(body) == export.to_nemo_rl(plans["nemo_rl"], job, cluster)
  refusal(lambda: export.get("deepspeed_chat"), "framework='deepspeed_chat'", "verl")


def test_search_exports_search_things_only():
  # The exporters are export's: search neither re-exports them nor aliases the package.
  import importlib.util  # pylint: disable=import-outside-toplevel
  import search  # pylint: disable=import-outside-toplevel
  for name in ("write_plan", "plan_to_dict", "export"):
    assert name not in search.__all__ and not hasattr(search, name), name
  assert importlib.util.find_spec("search.export") is None


# ----- refusals --------------------------------------------------------------------


def test_verl_fsdp_refuses_tp_and_pp():
  job = grpo_job()
  for name in ("tp", "pp"):
    plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(zero_stage=1, **{name: 2}),
                             engine=cm.Engine(tp=2))
    refusal(lambda: export.to_verl(plan, job, ONE_NODE), f"actor.train.{name}=2", "megatron")
    export.to_verl(plan, job, ONE_NODE, strategy="megatron", version="legacy")


def test_verl_refuses_what_only_resource_pool_spec_places():
  plan, job, cluster = critic_apart_ppo()
  refusal(lambda: export.to_verl(plan, job, cluster), "critic", "resource_pool_spec")


def test_verl_refuses_megatron_zero3_and_fsdp_selective():
  job = grpo_job()
  plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(tp=2), engine=cm.Engine(tp=2))
  refusal(lambda: export.to_verl(plan, job, ONE_NODE, strategy="megatron"), "zero_stage=3")
  plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(recompute="selective"),
                           engine=cm.Engine(tp=2))
  refusal(lambda: export.to_verl(plan, job, ONE_NODE), "recompute=selective")


def test_verl_split_sync_and_one_step_off_refusals():
  plan, job, cluster = split_async_grpo(staleness=0, partial=False)
  plan = with_roles(plan, HOST_REF, backend="bucketed")
  refusal(lambda: export.to_verl(plan, job, cluster), "trainer_mode", "legacy")
  o = export.to_verl(plan, job, cluster, version="legacy")
  assert o["async_training.staleness_threshold"] == 0.0  # fully_async's synchronous pipeline
  plan, job, cluster = split_async_grpo(staleness=2, partial=False)
  plan = with_roles(plan, HOST_REF, backend="bucketed")
  refusal(lambda: export.to_verl(plan, job, cluster), "partial_rollout")
  refusal(lambda: export.to_verl(plan, job, cluster, version="legacy",
                                 async_recipe="one_step_off"), "staleness=2", "one_step_off")


def test_non_uniform_pools_refused():
  job = grpo_job(prompts_per_step=11, mini_batches=1)  # 88 samples: 8 per rank of 11
  plan = cm.Plan.split(job, TWO_NODES, gen_gpus=5, engine=cm.Engine(tp=1),
                       mode=cm.Mode(staleness=1, partial_rollout=True))
  for fn in (lambda: export.to_verl(with_roles(plan, HOST_REF, backend="bucketed"), job,
                                    TWO_NODES, version="legacy"),
             lambda: to_openrlhf(plan, job, TWO_NODES)):
    refusal(fn, "pool 'train' of 11 GPUs", "n_gpus_per_node")
  # NeMo-RL gives generation whole nodes on a multi-node cluster.
  job = grpo_job(prompts_per_step=96)  # 192 samples per mini-batch: 16 per rank of 12
  plan = cm.Plan.split(job, TWO_NODES, gen_gpus=4, engine=cm.Engine(tp=1),
                       mode=cm.Mode(staleness=1, partial_rollout=True))
  refusal(lambda: export.to_nemo_rl(with_roles(plan, backend="bucketed"), job, TWO_NODES),
          "pool 'gen' of 4 GPUs",
          "whole nodes")


def test_openrlhf_refusals():
  job = grpo_job()
  plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(pp=2), engine=cm.Engine(tp=2))
  refusal(lambda: to_openrlhf(plan, job, ONE_NODE), "actor.train.pp=2", "pipeline")
  plan = cm.Plan.colocated(job, ONE_NODE, engine=cm.Engine(tp=2, pp=2))
  refusal(lambda: to_openrlhf(plan, job, ONE_NODE), "engine.pp=2")
  # vLLM engines on the actor's GPUs, the critic elsewhere: colocate_all would move it.
  plan, ppo, _ = critic_apart_ppo()
  refusal(lambda: to_openrlhf(plan, ppo, TWO_NODES), "colocate_all", "critic")
  # One --ds.* layout for every model.
  plan = cm.Plan.colocated(ppo, TWO_NODES, train=cm.Parallel(tp=2), critic=cm.Parallel(tp=4),
                           engine=cm.Engine(tp=2))
  refusal(lambda: to_openrlhf(plan, ppo, TWO_NODES), "critic.train.tp=4", "--ds.*")
  remax = cm.RLJob("remax", QWEN7B, prompts_per_step=64)
  plan = cm.Plan.colocated(remax, ONE_NODE, engine=cm.Engine(tp=2))
  refusal(lambda: to_openrlhf(plan, remax, ONE_NODE), "algorithm='remax'")


def test_nemo_rl_ppo_reward_model_and_reference():
  ppo = ppo_job(ppo_epochs=2)
  plan = cm.Plan.colocated(ppo, ONE_NODE, engine=cm.Engine(tp=2, sync_backend="ipc"))
  plan = plan.replace(roles=tuple(dataclasses.replace(r, train=r.train.replace(swap=1.0))
                                  if r.role == "actor" else r for r in plan.roles))
  d = export.to_nemo_rl(plan, ppo, ONE_NODE)
  assert d["defaults"] == "ppo_math_1B.yaml"
  assert d["ppo"]["ppo_epochs"] == 2 and d["ppo"]["num_generations_per_prompt"] == 1
  assert d["value"]["train_global_batch_size"] == 64  # 256 x 1 / 4
  # DAPO drops the reference: no KL penalty, so NeMo-RL neither loads nor runs one.
  dapo = cm.RLJob("dapo", QWEN7B, prompts_per_step=64, samples_per_prompt=8, oversample=1.5)
  d = export.to_nemo_rl(with_roles(cm.Plan.colocated(dapo, ONE_NODE, engine=cm.Engine(tp=2)),
                                   swap=True, backend="ipc"), dapo, ONE_NODE)
  assert d["loss_fn"] == {"reference_policy_kl_penalty": 0}
  assert d["grpo"]["use_dynamic_sampling"] is True and d["grpo"]["batch_multiplier"] == 1.5
  # A reward model on its own 2 GPUs of the node: grpo_rm_1B.yaml and its resources.
  job = grpo_job(reward_model=cm.models.get("qwen2.5-1.5b"))
  p = cm.Parallel(micro_batch=2)
  roles = (cm.RolePlan("actor", "train", train=p), cm.RolePlan("reference", "train", infer=p),
           cm.RolePlan("reward", "rm", infer=cm.Parallel(micro_batch=8)))
  pools = (cm.Pool("gen", 2.0), cm.Pool("train", 4.0), cm.Pool("rm", 2.0))
  plan = cm.Plan(pools=pools, roles=roles, engine=cm.Engine(tp=2, sync_backend="bucketed"),
                 rollout_pool="gen")
  d = export.to_nemo_rl(plan, job, ONE_NODE)
  assert d["defaults"] == "grpo_rm_1B.yaml"
  assert d["cluster"] == {"num_nodes": 1, "gpus_per_node": 8}
  assert d["policy"]["generation"]["colocated"]["resources"] == {"gpus_per_node": 2,
                                                                 "num_nodes": 1}
  assert d["env"]["reward_model"] == {
      "resources": {"gpus_per_node": 2, "num_nodes": 1}, "batch_size": 8,
      "dtensor_cfg": {"tensor_parallel_size": 1, "context_parallel_size": 1,
                      "cpu_offload": False}}


def test_nemo_rl_refusals():
  remax = cm.RLJob("remax", QWEN7B, prompts_per_step=64)
  plan = cm.Plan.colocated(remax, ONE_NODE, engine=cm.Engine(tp=2))
  refusal(lambda: export.to_nemo_rl(plan, remax, ONE_NODE), "algorithm='remax'")
  job = grpo_job()
  plan = with_roles(cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(pp=2),
                                      engine=cm.Engine(tp=2)), swap=True, backend="ipc")
  refusal(lambda: export.to_nemo_rl(plan, job, ONE_NODE, backend="dtensor"),
          "actor.train.pp=2", "megatron")
  refusal(lambda: export.to_nemo_rl(plan, job, ONE_NODE), "zero_stage=3", "use_custom_fsdp")
  plan = with_roles(cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(pp=2, zero_stage=1),
                                      engine=cm.Engine(tp=2)), swap=True, backend="ipc")
  assert export.to_nemo_rl(plan, job, ONE_NODE)["policy"]["megatron_cfg"]["enabled"] is True
  no_ref = ppo_job(use_reference=False)
  plan = cm.Plan.colocated(no_ref, ONE_NODE, engine=cm.Engine(tp=2))
  refusal(lambda: export.to_nemo_rl(plan, no_ref, ONE_NODE), "job.use_reference=False",
          "init_reference_model")
  rm = grpo_job(reward_model=cm.models.get("qwen2.5-1.5b"))
  plan = cm.Plan.colocated(rm, ONE_NODE, engine=cm.Engine(tp=2))
  refusal(lambda: export.to_nemo_rl(plan, rm, ONE_NODE), "reward model on pool 'all'",
          "resources")


def test_fusion_refused_everywhere():
  job = ppo_job()
  plan = cm.Plan.colocated(job, ONE_NODE, engine=cm.Engine(tp=2),
                           mode=cm.Mode(fuse_training=True))
  for fn in (export.to_verl, export.to_openrlhf, export.to_nemo_rl):
    refusal(lambda fn=fn: fn(plan, job, ONE_NODE), "fuse_training")


def test_batches_that_do_not_split_refused():
  job = grpo_job()
  plan = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(micro_batch=3),
                           engine=cm.Engine(tp=2))
  # The rule table's framework batch rules (costmodel/_src/specs/rule_table.py) refuse it.
  refusal(lambda: export.to_verl(plan, job, ONE_NODE), "veRL: ", "micro_batch=3",
          "ppo_mini_batch_size over dp ranks")
  refusal(lambda: to_openrlhf(plan, job, ONE_NODE), "OpenRLHF: ", "micro_batch=3",
          "train_batch_size")
  odd = grpo_job(mini_batches=3)
  plan = cm.Plan.colocated(odd, ONE_NODE, engine=cm.Engine(tp=2))
  refusal(lambda: export.to_verl(plan, odd, ONE_NODE), "samples_per_step/mini_batches=341.333",
          "ppo_mini_batch_size over dp ranks")


# ----- integral degrees --------------------------------------------------------------


def test_require_int():
  assert export.require_int(4.0, "f") == 4
  assert export.require_int(np.float32(2.0), "f") == 2
  assert export.require_int(jnp.asarray(3.0), "f") == 3
  refusal(lambda: export.require_int(2.5, "engine.tp"), "engine.tp=2.5", "integer")
  refusal(lambda: export.require_int(float("nan"), "x"), "x=nan")
  refusal(lambda: export.require_int(jnp.ones(3), "actor.train.tp"), "actor.train.tp", "shape")
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda x: export.require_int(x, "tp"))(2.0)


def test_relaxed_plans_refused_naming_the_field():
  job = grpo_job()
  # A relaxed plan's degrees are real-valued arrays (an exact one's are integers).
  relaxed = cm.Plan.colocated(job, ONE_NODE, train=cm.Parallel(tp=jnp.asarray(2.5)),
                              engine=cm.Engine(tp=2))
  for fn in (export.to_verl, export.to_openrlhf, export.to_nemo_rl):
    refusal(lambda fn=fn: fn(relaxed, job, ONE_NODE), "actor.train.tp=2.5", "integer")
  plan, _, _ = colocated_grpo()
  bad_pool = plan.replace(pools=(cm.Pool("all", 7.5),))
  refusal(lambda: export.to_verl(bad_pool, job, ONE_NODE), "pool 'all' gpus=7.5")
  bad_engine = plan.replace(engine=cm.Engine(tp=2, max_seqs=100.5))
  refusal(lambda: to_openrlhf(bad_engine, job, ONE_NODE), "engine.max_seqs=100.5")
  bad_micro = plan.replace(roles=tuple(
      dataclasses.replace(r, train=cm.Parallel(micro_batch=1.5)) if r.role == "actor" else r
      for r in plan.roles))
  refusal(lambda: export.to_nemo_rl(bad_micro, job, ONE_NODE), "actor.train.micro_batch=1.5")


# ----- command strings ---------------------------------------------------------------


def test_commands_quote_nothing_surprising():
  plan, job, cluster = colocated_grpo()
  o = export.to_verl(with_roles(plan, HOST_REF), job, cluster)
  cmd = export.verl_command(o)
  assert "'" not in cmd and '"' not in cmd
  assert shlex.split(cmd) == ["python3", "-m", "verl.trainer.main_ppo"] + [
      f"{k}={v}" for k, v in o.items()]
  assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.6" in cmd
  assert "actor_rollout_ref.actor.use_kl_loss=True" in cmd
  argv = to_openrlhf(with_roles(plan, backend="ipc"), job, cluster)
  cmd = export.openrlhf_command(argv)
  assert "'" not in cmd and '"' not in cmd
  assert shlex.split(cmd) == ["python3", "-m", "openrlhf.cli.train_ppo_ray", *argv]
  # Values that need quoting survive a round trip through the shell.
  odd = {"trainer.experiment_name": "run 1; rm -rf x", "data.train_batch_size": 8}
  assert shlex.split(export.verl_command(odd))[3:] == [
      "trainer.experiment_name=run 1; rm -rf x", "data.train_batch_size=8"]


# ----- offload and swap; the plan as a framework runs it ---------------------------------


def test_verl_offload_is_the_cpu_optimizer_and_swap_the_offload_keys():
  job = grpo_job()
  train = cm.Parallel(micro_batch=2, zero_stage=3, recompute="full")
  base = with_roles(cm.Plan.colocated(job, ONE_NODE, train=train, engine=cm.Engine(tp=2)),
                    HOST_REF)
  a = "actor_rollout_ref.actor.fsdp_config"
  swapped = export.to_verl(with_roles(base, swap=True), job, ONE_NODE)
  assert (swapped[f"{a}.param_offload"], swapped[f"{a}.optimizer_offload"]) == (True, True)
  assert f"{a}.offload_policy" not in swapped
  cpu_adam = with_roles(base, {}, False).replace(roles=tuple(
      dataclasses.replace(r, train=r.train.replace(offload=1.0), infer=r.infer_layout.replace(
          offload=1.0)) if r.role == "actor" else r for r in base.roles))
  refusal(lambda: export.to_verl(cpu_adam, job, ONE_NODE), "actor.train.offload=1",
          "strategy='fsdp2'")
  o = export.to_verl(cpu_adam, job, ONE_NODE, strategy="fsdp2")
  assert o[f"{a}.offload_policy"] is True and o[f"{a}.param_offload"] is False
  kw = dict(model=job.actor, response_mean=2000.0)
  for plan, out in ((with_roles(base, swap=True), swapped), (cpu_adam, o)):
    back = export.read_config("verl", out, **kw).plan
    assert export.plan_settings(back) == export.plan_settings(plan)
  # Megatron: the CPU optimizer is an added optimizer override (with the distributed optimizer).
  mega = cm.Parallel(tp=2, micro_batch=1, zero_stage=1, offload=1)
  plan = cm.Plan.colocated(job, ONE_NODE, train=mega, engine=cm.Engine(tp=2))
  plan = with_roles(plan, {"offload": 0.0})
  o = export.to_verl(plan, job, ONE_NODE, strategy="megatron")
  assert o["+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload"]
  assert o["actor_rollout_ref.actor.megatron.param_offload"] is False
  assert "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True" in (
      export.verl_command(o))
  back = export.read_config("verl", o, **kw).plan
  assert export.plan_settings(back) == export.plan_settings(plan)


def test_adapt_gives_each_framework_the_settings_it_fixes():
  """A plan searched without sync backend or swap exports once adapted, and the adapted plan
  is what the export runs: importing it back gives it again."""
  job = grpo_job()
  train = cm.Parallel(tp=2, micro_batch=1, zero_stage=1, recompute="full")
  searched = {"colocated": cm.Plan.colocated(job, TWO_NODES, train=train,
                                             engine=cm.Engine(tp=2)),
              "split": cm.Plan.split(job, TWO_NODES, gen_gpus=8, train=train,
                                     engine=cm.Engine(tp=2), mode=cm.Mode(staleness=1,
                                                                          partial_rollout=True))}
  expect = {"verl": ("per_tensor", "bucketed"), "openrlhf": ("ipc", "per_tensor"),
            "nemo_rl": ("ipc", "bucketed"), "slime": ("ipc", "bucketed"),
            "areal": ("bucketed", "bucketed")}
  opts = {"verl": {"strategy": "megatron"}, "openrlhf": {"vllm_default_max_seqs": True},
          "nemo_rl": {"backend": "megatron"}}
  for name in export.FRAMEWORKS:
    e = export.get(name)
    for i, (family, plan) in enumerate(searched.items()):
      o = opts.get(name, {})
      adapted = e.adapt(plan, **o)
      assert adapted.engine.sync_backend == expect[name][i], (name, family)
      assert export.plan_settings(e.adapt(adapted, **o)) == export.plan_settings(adapted)
      if name == "areal" and family == "colocated":
        continue  # AReaL colocates one-GPU engines only
      settings = e.to_config(adapted, job, TWO_NODES, **o)
      swap = float(adapted.role("actor").train.swap)
      assert swap == (1.0 if name in ("nemo_rl", "areal") and family == "colocated" else 0.0)
      if name in export.IMPORT_FRAMEWORKS:
        back = export.read_config(name, settings, model=job.actor, response_mean=2000.0,
                                  engine_max_seqs=1024)
        u = export.unexpressed(name)
        assert export.plan_settings(back.plan, u) == export.plan_settings(adapted, u), name
