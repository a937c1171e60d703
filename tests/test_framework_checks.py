"""The framework checks catch the settings a framework rejects.

Each case is a wrong setting an export could write, or one a framework asserts
against, checked with the key lists of the pinned commits; the check must name
it. Together with test_export_frameworks this shows the checks can fail.
"""

import cli_checks
import framework_checks as fc
import pytest


def _verl_base(**extra):
  o = {"trainer.nnodes": 1, "trainer.n_gpus_per_node": 8, "trainer.use_v1": True,
       "trainer.v1.trainer_mode": "sync", "data.train_batch_size": 64,
       "actor_rollout_ref.actor.strategy": "fsdp",
       "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
       "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
       "actor_rollout_ref.rollout.n": 8, "actor_rollout_ref.rollout.tensor_model_parallel_size": 2}
  o.update(extra)
  return o


def test_key_lists_name_their_pinned_commit():
  for framework, commit in (("verl", "1dda039"), ("openrlhf", "3c3be62"), ("nemo_rl", "7ea279a"),
                            ("slime", "624b824"), ("areal", "4aef98d")):
    d = fc.load(framework)
    assert d["commit"].startswith(commit) and len(d["commit"]) == 40


def test_verl_base_passes():
  assert fc.check_verl(_verl_base()) == []


@pytest.mark.parametrize("extra,needle", [
    ({"critic.model.fsdp_config.param_offload": False}, "critic.model.fsdp_config.param_offload"),
    # the FSDP reward-model worker keys of older trees (1dda039 keeps only a legacy
    # reward_model.* shim that migrates to reward.reward_model.*)
    ({"reward_model.micro_batch_size_per_gpu": 8}, "reward_model.micro_batch_size_per_gpu"),
    ({"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3}, "micro=3"),
    ({"data.train_batch_size": 8}, "train_batch_size < ppo_mini_batch_size"),
    ({"actor_rollout_ref.rollout.tensor_model_parallel_size": 2.0}, "default is int"),
    ({"algorithm.filter_groups.enable": True}, "filter_groups.metric"),
    ({"algorithm.adv_estimator": "reinforce"}, "not an AdvantageEstimator"),
    ({"trainer.v1.trainer_mode": "separate_async",
      "trainer.v1.separate_async.parameter_sync_step": 2,
      "actor_rollout_ref.rollout.nnodes": 1}, "parameter_sync_step"),
    ({"trainer.v1.trainer_mode": "separate_async",
      "trainer.v1.separate_async.parameter_sync_step": 4,
      "actor_rollout_ref.rollout.nnodes": 1, "actor_rollout_ref.rollout.n_gpus_per_node": 8},
     "checkpoint engine"),
])
def test_verl_checks_catch(extra, needle):
  problems = fc.check_verl(_verl_base(**extra))
  assert any(needle in p for p in problems), problems


def test_verl_megatron_critic_has_no_forward_micro_batch_key():
  o = _verl_base(**{"actor_rollout_ref.actor.strategy": "megatron",
                    "critic.forward_micro_batch_size_per_gpu": 2})
  assert any("critic.forward_micro_batch_size_per_gpu: not a key" in p
             for p in fc.check_verl(o))


def test_verl_fully_async_assertions():
  o = _verl_base(**{"trainer.use_v1": False, "actor_rollout_ref.hybrid_engine": False,
                    "rollout.nnodes": 1, "rollout.n_gpus_per_node": 8,
                    "async_training.staleness_threshold": 1.0,
                    "async_training.trigger_parameter_sync_step": 4})
  del o["trainer.v1.trainer_mode"]
  problems = fc.check_verl(o)
  assert any("train_batch_size == 0" in p for p in problems)
  assert any("total_rollout_steps" in p for p in problems)


def test_openrlhf_checks_catch():
  ok = ["--actor.num_nodes", "1", "--actor.num_gpus_per_node", "8", "--vllm.num_engines", "4",
        "--vllm.tensor_parallel_size", "2", "--rollout.batch_size", "64",
        "--rollout.n_samples_per_prompt", "8", "--rollout.micro_batch_size", "4",
        "--train.batch_size", "128", "--train.micro_batch_size", "2"]
  assert cli_checks.check_openrlhf(ok) == []
  # The underscore spellings of v0.9.x-v0.10.1 do not parse at v0.11.0.
  legacy = cli_checks.check_openrlhf(["--actor_num_nodes", "1"])
  assert any("--actor_num_nodes" in p for p in legacy)
  tp3 = ok + ["--ds.tensor_parallel_size", "2", "--ds.zero_stage", "3"]
  assert any("AutoTP" in p for p in cli_checks.check_openrlhf(tp3))
  over = ok + ["--rollout.vllm_generate_batch_size", "96"]
  assert any("without async" in p for p in cli_checks.check_openrlhf(over))
  assert cli_checks.check_openrlhf(over + ["--train.async_enable"]) == []
  bad_type = ["--ds.zero_stage", "three"]
  assert any("argparse" in p for p in cli_checks.check_openrlhf(bad_type))


def _nemo_base(**policy):
  p = {"train_global_batch_size": 256, "train_micro_batch_size": 2,
       "dtensor_cfg": {"enabled": True, "tensor_parallel_size": 1, "context_parallel_size": 1},
       "megatron_cfg": {"enabled": False},
       "generation": {"vllm_cfg": {"enable_prefix_caching": True},
                      "vllm_kwargs": {"max_num_seqs": 128}, "colocated": {"enabled": True}}}
  p.update(policy)
  return {"defaults": "grpo_math_1B.yaml", "cluster": {"num_nodes": 1, "gpus_per_node": 8},
          "grpo": {"num_prompts_per_step": 32, "async_grpo": {"enabled": False}}, "policy": p}


def test_nemo_rl_checks_catch():
  assert fc.check_nemo_rl(_nemo_base()) == []
  dup = _nemo_base(generation={"vllm_kwargs": {"enable_prefix_caching": True},
                               "colocated": {"enabled": True}})
  assert any("already passes" in p for p in fc.check_nemo_rl(dup))
  cp = _nemo_base(dtensor_cfg={"enabled": True, "context_parallel_size": 2})
  assert any("sequence_packing" in p for p in fc.check_nemo_rl(cp))
  fsdp = _nemo_base(megatron_cfg={"enabled": False,
                                  "distributed_data_parallel_config": {"use_custom_fsdp": True}})
  assert any("never read" in p for p in fc.check_nemo_rl(fsdp))
  no_defaults = _nemo_base()
  del no_defaults["defaults"]
  assert any("defaults" in p for p in fc.check_nemo_rl(no_defaults))
  ep = _nemo_base(dtensor_cfg={"enabled": True, "expert_parallel_size": 4})
  assert fc.check_nemo_rl(ep) == []  # declared by DTensorConfig, not in the example YAML
  typo = _nemo_base(dtensor_cfg={"enabled": True, "expert_paralel_size": 4})
  assert any("expert_paralel_size" in p for p in fc.check_nemo_rl(typo))
  multiplier = _nemo_base()
  multiplier["grpo"]["batch_multiplier"] = "2"
  assert any("declared float" in p for p in fc.check_nemo_rl(multiplier))


def test_slime_and_areal_checks_catch():
  argv = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate",
          "--rollout-num-gpus-per-engine", "2", "--tensor-model-parallel-size", "2",
          "--rollout-batch-size", "32", "--n-samples-per-prompt", "8",
          "--global-batch-size", "64", "--micro-batch-size", "1"]
  assert cli_checks.check_slime({"script": "train.py", "argv": argv}) == []
  assert any("not --colocate" in p for p in cli_checks.check_slime({"script": "train_async.py",
                                                            "argv": argv}))
  assert any("--tensor-parallel" in p for p in cli_checks.check_slime(
      {"script": "train.py", "argv": argv + ["--tensor-parallel", "2"]}))
  cfg = {"rollout": {"backend": "sglang:d4t2", "max_head_offpolicyness": 1},
         "actor": {"backend": "megatron:d2p2t2"}}
  assert fc.check_areal(cfg) == []
  assert any("allocation grammar" in p for p in fc.check_areal(
      {"rollout": {"backend": "sglang:d4e2"}, "actor": {"backend": "megatron:d2p2t2"}}))
  colo = {"rollout": {"backend": "sglang:d4t2",
                      "scheduling_strategy": {"type": "colocation", "target": "actor"}},
          "actor": {"backend": "megatron:d2p2t2"}}
  assert any("dp_size must equal" in p for p in fc.check_areal(colo))
  assert any("not a key" in p for p in fc.check_areal({**cfg, "rollout_backend": "x"}))
