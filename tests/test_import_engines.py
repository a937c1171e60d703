"""Engines and recipes the cost model reads as the nearest modelled one, and what it refuses.

The scripts and configs are written here in the shapes the frameworks' examples use
(veRL's VeOmni and FSDP-Turbo engines and vLLM's experts across DP ranks, NeMo-RL's
Megatron, TensorRT-LLM and Dynamo generation backends, FP8 recipes, AReaL's archon
engine); each import states its approximation on the "not modelled" line.
"""

import textwrap

import pytest
from test_import_configs import _export

import costmodel as cm
import export

VERL = """\
    MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-30B-A3B}
    ARGS=(
        algorithm.adv_estimator=grpo
        data.train_batch_size=64
        data.max_prompt_length=1024
        data.max_response_length=2048
        actor_rollout_ref.model.path="$MODEL_PATH"
        actor_rollout_ref.actor.ppo_mini_batch_size=16
        actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
        actor_rollout_ref.rollout.n=8
        actor_rollout_ref.rollout.tensor_model_parallel_size=TP
        actor_rollout_ref.rollout.data_parallel_size=DP
        actor_rollout_ref.rollout.expert_parallel_size=EP
        trainer.nnodes=1
        trainer.n_gpus_per_node=8
        EXTRA
    )
    python3 -m verl.trainer.main_ppo "${ARGS[@]}"
    """


def _verl(tmp_path, tp=2, dp=1, ep=1, extra=""):
  text = (VERL.replace("=TP", f"={tp}").replace("=DP", f"={dp}").replace("=EP", f"={ep}")
          .replace("EXTRA", extra))
  path = tmp_path / f"run_{tp}_{dp}_{ep}_{abs(hash(extra))}.sh"
  path.write_text(textwrap.dedent(text))
  return export.read_config("verl", str(path), response_mean=1000)


def test_verl_veomni_is_fsdp_with_its_ulysses_and_offloads(tmp_path):
  imp = _verl(tmp_path, extra="model_engine=veomni\n"
              "        actor_rollout_ref.actor.veomni.ulysses_parallel_size=2\n"
              "        actor_rollout_ref.actor.veomni.param_offload=True\n"
              "        actor_rollout_ref.actor.veomni.optimizer_offload=True")
  actor = imp.plan.roles[0].train
  assert (float(actor.zero_stage), float(actor.cp), float(actor.swap)) == (3.0, 2.0, 1.0)
  assert any("strategy='veomni': costed as veRL's FSDP engine" in n for n in imp.not_modelled)
  # both offload keys are read: neither is listed as not modelled
  assert not any("veomni.optimizer_offload" in n for n in imp.not_modelled)
  with pytest.raises(ValueError, match=r"veomni.expert_parallel_size=8: expert parallelism "
                     r"inside an FSDP engine \(veomni\)"):
    _verl(tmp_path, extra="model_engine=veomni\n"
          "        actor_rollout_ref.actor.veomni.expert_parallel_size=8")


def test_verl_fsdp_turbo_reads_its_distributed_section(tmp_path):
  d = "actor_rollout_ref.actor.fsdp_config.turbo_config.distributed"
  imp = _verl(tmp_path, extra="actor_rollout_ref.actor.strategy=fsdp_turbo\n"
              f"        {d}.fully_shard_parallel_size=8\n        {d}.ulysses_parallel_size=4")
  actor = imp.plan.roles[0].train
  assert (float(actor.zero_stage), float(actor.cp)) == (3.0, 4.0)
  assert any("strategy='fsdp_turbo'" in n for n in imp.not_modelled)
  with pytest.raises(ValueError, match=rf"{d}.expert_parallel_size=8"):
    _verl(tmp_path, extra=f"actor_rollout_ref.actor.strategy=fsdp_turbo\n"
          f"        {d}.expert_parallel_size=8")


def test_vllm_experts_across_dp_ranks_is_data_parallel_attention_when_tp_is_one(tmp_path):
  imp = _verl(tmp_path, tp=1, dp=8, ep=8)
  e = imp.plan.engine
  assert (float(e.tp), float(e.ep), float(e.dp_attention)) == (8.0, 8.0, 1.0)
  assert any("expert_parallel_size=8 over actor_rollout_ref.rollout.data_parallel_size=8: "
             "costed as one engine of 8 GPUs with data-parallel attention" in n
             for n in imp.not_modelled)
  # ep = tp: experts over the engine's own TP GPUs, as stated
  same = _verl(tmp_path, tp=2, dp=1, ep=2).plan.engine
  assert (float(same.tp), float(same.ep), float(same.dp_attention)) == (2.0, 2.0, 0.0)
  with pytest.raises(ValueError, match=r"attention is split 2 ways has no engine layout"):
    _verl(tmp_path, tp=2, dp=4, ep=8)
  with pytest.raises(ValueError, match=r"expert parallelism spans .* = 4 GPUs"):
    _verl(tmp_path, tp=2, dp=2, ep=8)


def _nemo_rl(tmp_path, edit, model_match=lambda n, j: j.algorithm == "grpo"):
  job, plan, cluster, cfg = _export("nemo_rl", model_match)
  cfg = dict(cfg)
  cfg.pop("defaults", None)
  edit(cfg)
  path = tmp_path / "run.yaml"
  path.write_text(export.to_yaml(cfg))
  return job, export.read_config("nemo_rl", str(path), model=job.actor, response_mean=500)


def _megatron_policy(cfg, tp):
  cfg["policy"]["dtensor_cfg"] = {"enabled": False}
  cfg["policy"]["megatron_cfg"] = {
      "enabled": True, "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": 1,
      "context_parallel_size": 1, "sequence_parallel": tp > 1,
      "optimizer": {"use_distributed_optimizer": True}}


def test_nemo_rl_blockwise_fp8_is_fp8_training_and_fp8_vllm_serves_fp8_weights(tmp_path):
  def edit(cfg):
    _megatron_policy(cfg, 1)
    cfg["policy"]["megatron_cfg"]["fp8_cfg"] = {"enabled": True, "fp8": "e4m3",
                                                "fp8_recipe": "blockwise", "fp8_param": False}
    cfg["policy"]["generation"]["vllm_cfg"]["precision"] = "fp8"
  _, imp = _nemo_rl(tmp_path, edit)
  assert imp.plan.roles[0].train.precision == cm.Precision(compute="fp8")
  assert imp.plan.engine.precision == cm.Precision(weights="fp8", compute="fp8")
  assert any("fp8_cfg recipe 'blockwise': costed as per-tensor-scaled FP8 GEMMs" in n
             for n in imp.not_modelled)

  def fp8_param(cfg):
    edit(cfg)
    cfg["policy"]["megatron_cfg"]["fp8_cfg"]["fp8_param"] = True
  with pytest.raises(ValueError, match=r"fp8_cfg keeps the parameters in FP8"):
    _nemo_rl(tmp_path, fp8_param)


def test_nemo_rl_megatron_generation_is_an_engine_of_the_policy_degrees(tmp_path):
  def edit(cfg):
    _megatron_policy(cfg, 2)
    cfg["policy"]["generation"]["backend"] = "megatron"
    cfg["policy"]["generation"]["mcore_generation_config"] = {"buffer_size_gb": 10}
    cfg["policy"]["generation"]["colocated"] = {"enabled": True}
  job, imp = _nemo_rl(tmp_path, edit)
  e = imp.plan.engine
  assert (float(e.tp), float(e.pp), e.sync_backend) == (2.0, 1.0, "ipc")
  # the policy's BF16 weight shard and the 10 GiB KV buffer, over the H100's HBM
  want = (2.0 * job.actor.total_params / 2 + 10 * 2**30) / cm.hardware.get("H100").hbm_bytes
  assert float(e.memory_fraction) == pytest.approx(float(want))
  assert any("backend='megatron': costed as an engine of the policy's tp=2" in n
             for n in imp.not_modelled)


def test_nemo_rl_trtllm_dynamo_and_nixl_are_read_as_their_nearest_engines(tmp_path):
  def trtllm(cfg):
    g = cfg["policy"]["generation"]
    g["backend"] = "trtllm"
    g["trtllm_cfg"] = {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.6,
                       "max_batch_size": 128}
  _, imp = _nemo_rl(tmp_path, trtllm)
  e = imp.plan.engine
  assert (float(e.tp), float(e.memory_fraction), float(e.max_seqs)) == (2.0, 0.6, 128.0)
  assert any("share of the memory left after the weights" in n for n in imp.not_modelled)
  # the vLLM section the base carries is no setting of a TensorRT-LLM run
  assert not any(".vllm_cfg." in n for n in imp.not_modelled)

  def dynamo(cfg):
    cfg["policy"]["generation"]["backend"] = "dynamo"
    cfg["policy"]["generation"]["dynamo_cfg"] = {"engine": "sglang"}
  with pytest.raises(ValueError, match=r"dynamo_cfg.engine='sglang': only Dynamo's vLLM"):
    _nemo_rl(tmp_path, dynamo)

  def nixl(cfg):
    cfg["policy"]["generation"]["refit_transport"] = "nixl"
  _, imp = _nemo_rl(tmp_path, nixl, lambda n, j: n == "grpo/zero3/split-sync")
  assert (imp.plan.rollout_pool, imp.plan.engine.sync_backend) == ("gen", "bucketed")
  assert any("refit_transport='nixl'" in n for n in imp.not_modelled)


def test_nemo_rl_mamba_ssm_cache_dtype_is_the_engine_state_format(tmp_path):
  def fp32(cfg):
    cfg["policy"]["generation"]["vllm_kwargs"]["mamba_ssm_cache_dtype"] = "float32"
  _, imp = _nemo_rl(tmp_path, fp32)
  assert imp.plan.engine.precision == cm.Precision(state="fp32")
  assert not any("mamba_ssm_cache_dtype" in n for n in imp.not_modelled)
  out = export.get("nemo_rl").to_config(imp.plan, imp.job, imp.cluster)
  assert out["policy"]["generation"]["vllm_kwargs"]["mamba_ssm_cache_dtype"] == "float32"

  def trtllm(cfg):
    g = cfg["policy"]["generation"]
    g["backend"] = "trtllm"
    g["trtllm_cfg"] = {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.6,
                       "max_batch_size": 128}
    g["trtllm_kwargs"] = {"kv_cache_config": {"mamba_ssm_cache_dtype": "float32"}}
  _, imp = _nemo_rl(tmp_path, trtllm)
  assert imp.plan.engine.precision.state == "fp32"

  def bad(cfg):
    cfg["policy"]["generation"]["vllm_kwargs"]["mamba_ssm_cache_dtype"] = "fp64"
  with pytest.raises(ValueError, match=r"vllm_kwargs.mamba_ssm_cache_dtype='fp64' is not one of"):
    _nemo_rl(tmp_path, bad)


def test_slime_blockwise_fp8_and_a_refused_format(tmp_path):
  job, plan, cluster, settings = _export("slime", lambda n, j: True)
  argv = [a for a in settings["argv"]]
  fp8 = {**settings, "argv": argv + ["--fp8-format", "e4m3", "--fp8-recipe", "blockwise"]}
  imp = export.read_config("slime", fp8, model=job.actor, response_mean=500)
  assert imp.plan.roles[0].train.precision == cm.Precision(compute="fp8")
  assert any("recipe 'blockwise'" in n for n in imp.not_modelled)
  bad = {**settings, "argv": argv + ["--fp8-format", "e5m2"]}
  with pytest.raises(ValueError, match=r"format 'e5m2' is not one of \('e4m3', 'hybrid'\)"):
    export.read_config("slime", bad, model=job.actor, response_mean=500)


def test_areal_archon_data_parallel_is_fsdp_and_its_other_meshes_are_refused(tmp_path):
  job, plan, cluster, cfg = _export("areal", lambda n, j: n == "dapo-moe/zero3/split-sync")
  flat = dict(cfg)
  assert flat["actor"]["backend"] == "fsdp:d8"
  flat["actor"] = {**flat["actor"], "backend": "archon:d8"}
  imp = export.read_config("areal", flat, model=job.actor, response_mean=500)
  assert float(imp.plan.roles[0].train.zero_stage) == 3.0
  assert any("the archon engine costed as FSDP" in n for n in imp.not_modelled)
  flat["actor"] = {**flat["actor"], "backend": "archon:d2t2"}
  with pytest.raises(ValueError, match=r"archon engine's TP, PP and EP meshes"):
    export.read_config("areal", flat, model=job.actor, response_mean=500)


def test_areal_response_bound_takes_its_generation_defaults(tmp_path):
  job, plan, cluster, cfg = _export("areal", lambda n, j: n == "dapo-moe/zero3/split-sync")
  flat = {**cfg, "gconfig": {k: v for k, v in cfg["gconfig"].items() if k != "max_new_tokens"}}
  prompt = cfg["train_dataset"]["max_length"]
  # no max_new_tokens: GenerationHyperparameters' 16,384, within max_tokens less the prompt
  flat["gconfig"]["max_tokens"] = prompt + 1000
  imp = export.read_config("areal", flat, model=job.actor, response_mean=500)
  assert float(imp.job.response.max) == 1000
  flat["gconfig"].pop("max_tokens")  # 32,768 with the prompt
  imp = export.read_config("areal", flat, model=job.actor, response_mean=500)
  assert float(imp.job.response.max) == min(16384, 32768 - prompt)
  flat["gconfig"]["max_tokens"] = prompt
  with pytest.raises(ValueError, match=rf"gconfig.max_tokens={prompt} leaves no response"):
    export.read_config("areal", flat, model=job.actor, response_mean=500)


@pytest.mark.parametrize("path", ["/path/to/nemotron-super-hf-checkpoint",
                                  "Follow instructions in docs/guides/deepseek.md"])
def test_a_model_path_that_is_an_instruction_is_refused_as_one(tmp_path, path):
  def edit(cfg):
    cfg["policy"]["model_name"] = path
  with pytest.raises(ValueError, match=r"model path .* is an instruction, not a path; give "
                     r"model= a preset"):
    job, _, _, cfg = _export("nemo_rl", lambda n, j: j.algorithm == "grpo")
    cfg = dict(cfg)
    cfg.pop("defaults", None)
    edit(cfg)
    export.read_config("nemo_rl", cfg, response_mean=500)


def test_slime_without_a_memory_fraction_takes_sglangs_own_rule():
  """SGLang v0.5.15.post1 (slime's pin) sets ``mem_fraction_static`` itself; hand-derived:
  reserved MiB = 512 + 1.5 x chunked prefill + TP x PP / 8 x 1024 + 2 x decode graph
  max_bs [+ 8 per prefill graph size], fraction = round((M - reserved) / M, 3)."""
  from export.slime import sglang_memory
  job, plan, cluster, settings = _export("slime", lambda n, j: True)
  argv = list(settings["argv"])
  i = argv.index("--sglang-mem-fraction-static")
  del argv[i:i + 2]
  assert "--colocate" in argv and argv[argv.index("--rollout-num-gpus-per-engine") + 1] == "2"
  # colocated: slime's --offload-rollout turns on SGLang's memory saver, no prefill graphs;
  # H100 (80 GiB = 81,920 MiB), TP 2: 512 + 12,288 + 256 + 2 x 256 = 13,568
  imp = export.read_config("slime", {**settings, "argv": argv}, model=job.actor,
                           response_mean=500)
  assert float(imp.plan.engine.memory_fraction) == pytest.approx(0.834)  # 68,352 / 81,920
  assert any("0.834 is the fraction SGLang v0.5.15.post1 sets itself on a H100" in n
             for n in imp.not_modelled)
  capped = {**settings, "argv": argv + ["--sglang-cuda-graph-max-bs-decode", "64"]}
  imp = export.read_config("slime", capped, model=job.actor, response_mean=500)
  assert float(imp.plan.engine.memory_fraction) == pytest.approx(0.839)  # 1 - 13,184 / 81,920
  # split engines keep the prefill graphs: 58 sizes (4..8,192) x 8 = 464 MiB more
  assert sglang_memory.static_fraction(81920, tp=2) == pytest.approx(0.829)
  # 40 GiB, TP 1: chunk 4,096, max_bs 32, 50 sizes: 512 + 6,144 + 128 + 64 + 400 = 7,248
  assert sglang_memory.static_fraction(40960, tp=1) == pytest.approx(0.823)
  # DP attention, TP = DP = 8, max_bs 512 > 300: + 512 x 8 x (3 + 1.5) = 18,432 -> 33,744
  assert sglang_memory.static_fraction(81920, tp=8, dp=8,
                                       dp_attention=True) == pytest.approx(0.588)
  # MLA attention reserves 1,536 MiB for the prefill graphs instead of 464
  assert sglang_memory.static_fraction(81920, tp=8, dp=8, dp_attention=True,
                                       mla=True) == pytest.approx(0.575)
  # the 10 GiB floor above 60 GiB: TP 1, chunk 2,048, no graphs: 512 + 3,072 + 128 < 10,240,
  # so 1 - 10,240 / 81,920
  assert sglang_memory.static_fraction(81920, tp=1, chunked_prefill=2048, decode_graphs=False,
                                       prefill_graphs=False) == pytest.approx(0.875)
  with pytest.raises(ValueError, match=r"tp=0 must be positive"):
    sglang_memory.static_fraction(81920, tp=0)
