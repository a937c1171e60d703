"""Configs as the frameworks compose them: NeMo-RL's defaults: chains and interpolation,
AReaL's interpolation and allocation strings, slime's sourced Megatron model flags.

The configs and scripts are written here in the frameworks' shapes (a recipe two
folders below the file it extends, ``${mul:...}``, ``_override_``, a model file
``source``d by the launch script); the bases are this project's own exports.
"""

import math
import textwrap

import pytest
import test_export_frameworks as grid
import yaml

import costmodel as cm
import export


def _export(framework, match):
  for name, job, plan, cluster in grid.GRID:
    plan = grid.for_framework(framework, plan)
    if not match(name, job):
      continue
    try:
      return job, plan, cluster, export.get(framework).to_config(plan, job, cluster)
    except ValueError:
      continue
  pytest.fail(f"no plan of the grid exports to {framework}")


def _write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(textwrap.dedent(text))
  return str(path)


def test_nemo_rl_recipe_extends_its_base_and_interpolates(tmp_path):
  job, plan, cluster, cfg = _export("nemo_rl", lambda n, j: j.algorithm == "grpo")
  cfg = dict(cfg)
  cfg.pop("defaults", None)
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "base.yaml").write_text(export.to_yaml(cfg))
  recipe = _write(tmp_path / "configs" / "recipes" / "llm" / "r.yaml", """\
      defaults: ../../base.yaml
      policy:
        max_total_sequence_length: 4096
        generation:
          max_new_tokens: ${policy.max_total_sequence_length}
        dynamic_batching:
          enabled: true
          train_mb_tokens: ${mul:${policy.max_total_sequence_length}, 2}
          logprob_mb_tokens: ${mul:${policy.max_total_sequence_length}, 4}
      """)
  imp = export.read_config("nemo_rl", recipe, model=job.actor, response_mean=500)
  # prompt and response share the 4,096 tokens: the prompt is assumed (1,024, at most half)
  cap = min(cfg.get("data", {}).get("max_input_seq_length") or 4096, 2048, 1024)
  assert float(imp.job.prompt_len) == cap
  assert float(imp.job.response.max) == 4096 - cap
  assert any("prompt_len=" in n for n in imp.not_modelled)
  actor = imp.plan.roles[0]
  seq = cap + 500
  assert float(actor.train.micro_batch) == 8192 // seq  # the token budget over a sequence
  assert float(actor.infer.micro_batch) == 16384 // seq
  # keys the recipe does not restate come from the base
  assert float(imp.job.prompts_per_step) == float(job.prompts_per_step)
  # and prompt_len= sets the prompt
  given = export.read_config("nemo_rl", recipe, model=job.actor, response_mean=500,
                             prompt_len=256)
  assert float(given.job.prompt_len) == 256 and float(given.job.response.max) == 3840


def test_nemo_rl_override_marker_replaces_a_section(tmp_path):
  job, plan, cluster, cfg = _export("nemo_rl", lambda n, j: j.algorithm == "grpo")
  cfg = dict(cfg)
  cfg.pop("defaults", None)
  base = tmp_path / "base.yaml"
  base.write_text(export.to_yaml(cfg))
  child = _write(tmp_path / "child.yaml", """\
      defaults: base.yaml
      cluster:
        _override_: true
        num_nodes: 3
      """)
  with pytest.raises(ValueError, match="cluster.gpus_per_node is not set"):
    export.read_config("nemo_rl", child, model=job.actor, response_mean=500)


def test_nemo_rl_missing_base_is_read_as_the_config_alone(tmp_path):
  job, plan, cluster, cfg = _export("nemo_rl", lambda n, j: j.algorithm == "grpo")
  path = tmp_path / "alone.yaml"
  path.write_text(export.to_yaml({**cfg, "defaults": "not_here.yaml"}))
  imp = export.read_config("nemo_rl", str(path), model=job.actor, response_mean=500)
  assert any("not_here.yaml not found" in n for n in imp.not_modelled)


def test_areal_interpolation_allocation_mode_and_token_budget(tmp_path):
  job, plan, cluster, cfg = _export("areal", lambda n, j: j.algorithm == "grpo"
                                    and j.actor.name == "qwen2.5-7b")
  d = yaml.safe_load(export.to_yaml(cfg))
  gen = d["rollout"].pop("backend")  # the rollout's engine only in the allocation string
  d["allocation_mode"] = f"{gen}+{d['actor']['backend']}"
  if "ref" in d:
    d["ref"]["backend"] = "${actor.backend}"
  d["actor"].setdefault("mb_spec", {})["max_tokens_per_mb"] = 6000
  path = tmp_path / "c.yaml"
  path.write_text(yaml.safe_dump(d))
  imp = export.read_config("areal", str(path), model=job.actor, response_mean=1000,
                           gpus_per_node=8)
  actor = imp.plan.roles[0]
  seq = float(imp.job.prompt_len) + 1000
  assert float(actor.train.micro_batch) <= math.floor(6000 / seq)
  assert float(actor.train.tp) == float(plan.roles[0].train.tp)
  assert float(imp.plan.engine.tp) == float(plan.engine.tp)


# A short AReaL experiment config in the shape its examples take.
_AREAL = """\
    experiment_name: e
    trial_name: t
    cluster: {{n_nodes: {nodes}, n_gpus_per_node: {per_node}}}
    allocation_mode: {allocation}
    rollout: {{max_head_offpolicyness: 2, consumer_batch_size: 8}}
    gconfig: {{n_samples: 4, max_new_tokens: {new}}}
    actor: {{path: Qwen/Qwen2.5-1.5B-Instruct, mb_spec: {{max_tokens_per_mb: 8192}}}}
    sglang: {{mem_fraction_static: 0.3}}
    train_dataset: {{batch_size: 8, max_length: {prompt}}}
    """


def _areal(tmp_path, name, nodes=1, per_node=1, allocation="sglang:d1+d1", new=1024,
           prompt=512):
  return _write(tmp_path / name, _AREAL.format(nodes=nodes, per_node=per_node,
                                               allocation=allocation, new=new, prompt=prompt))


def test_areal_allocation_wrapping_onto_one_gpu_shares_it(tmp_path):
  # AReaL's single-GPU examples: the engine and the trainer each ask for the one
  # GPU, and the local launcher hands it to both (round-robin over the devices).
  imp = export.read_config("areal", _areal(tmp_path, "one.yaml"), response_mean=500)
  assert [(p.name, float(p.gpus)) for p in imp.plan.pools] == [("all", 1.0)]
  assert imp.plan.rollout_pool == "all"
  assert float(imp.plan.roles[0].train.swap) == 0.0  # no colocation strategy: no offload
  assert imp.plan.mode.staleness == 0
  assert any("round-robin" in n for n in imp.not_modelled)
  assert any("max_head_offpolicyness=2" in n for n in imp.not_modelled)
  # Two nodes: each side keeps its own GPUs, asynchronous as configured.
  imp = export.read_config("areal", _areal(tmp_path, "two.yaml", nodes=2), response_mean=500)
  assert [p.name for p in imp.plan.pools] == ["gen", "train"]
  assert imp.plan.mode.staleness == 2
  # More than the node holds, not the node's GPUs twice: still refused.
  bad = _areal(tmp_path, "bad.yaml", allocation="sglang:d2+d1")
  with pytest.raises(ValueError, match="pools hold 3 GPUs, more than the cluster's 1"):
    export.read_config("areal", bad, response_mean=500)


def test_areal_prompt_fits_the_token_budget_with_the_longest_response(tmp_path):
  # AReaL refuses any sequence longer than mb_spec.max_tokens_per_mb, so a run
  # that runs keeps prompt + response within it: 8192 - 2048 = 6144-token prompts.
  tight = _areal(tmp_path, "c.yaml", per_node=8, allocation="sglang:d4+d4", new=2048,
                 prompt=8192)
  imp = export.read_config("areal", tight, response_mean=1000)
  assert float(imp.job.prompt_len) == 6144
  assert any("prompts taken as at most 6144 tokens" in n for n in imp.not_modelled)
  loose = _areal(tmp_path, "d.yaml", per_node=8, allocation="sglang:d4+d4", new=2048,
                 prompt=4096)
  imp = export.read_config("areal", loose, response_mean=1000)
  assert float(imp.job.prompt_len) == 4096
  assert not any("prompts taken" in n for n in imp.not_modelled)


MODEL_FILE = """\
    NLAYERS=12
    FIRST_K_DENSE_REPLACE=2
    arr=()
    for ((i=0; i<NLAYERS; i++)); do
      if (( i < FIRST_K_DENSE_REPLACE )); then arr+=(0); else arr+=(1); fi
    done
    printf -v MOE_LAYER_FREQ "[%s]" "$(IFS=', '; echo "${arr[*]}")"
    MODEL_ARGS=(
       --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
       --num-layers ${NLAYERS} --hidden-size 1024 --ffn-hidden-size 4096
       --num-attention-heads 16 --group-query-attention --num-query-groups 4
       --kv-channels 64 --vocab-size 32000
       --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512
       --moe-layer-freq "$MOE_LAYER_FREQ"
    )
    """

SLIME_RUN = """\
    SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
    source "${SCRIPT_DIR}/models/tiny-moe.sh"
    ROLLOUT_ARGS=(--rollout-batch-size 16 --n-samples-per-prompt 8
                  --rollout-max-response-len 4096 --num-steps-per-rollout 2)
    PERF_ARGS=(--tensor-model-parallel-size 1 --expert-model-parallel-size 4
               --use-dynamic-batch-size --max-tokens-per-gpu 8192)
    SGLANG_ARGS=(--rollout-num-gpus-per-engine 1 --sglang-mem-fraction-static 0.7)
    ray job submit --address="http://127.0.0.1:8265" -- python3 train.py \\
       --actor-num-nodes 1 --actor-num-gpus-per-node 8 --colocate \\
       ${MODEL_ARGS[@]} --hf-checkpoint /root/TinyMoE ${ROLLOUT_ARGS[@]} \\
       ${PERF_ARGS[@]} ${SGLANG_ARGS[@]}
    """


def test_slime_reads_the_architecture_from_the_sourced_megatron_flags(tmp_path):
  _write(tmp_path / "scripts" / "models" / "tiny-moe.sh", MODEL_FILE)
  run = _write(tmp_path / "scripts" / "run-tiny.sh", SLIME_RUN)
  imp = export.read_config("slime", run, response_mean=1000)
  m = imp.job.actor
  assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, m.vocab) == (
      12, 1024, 16, 4, 64, 32000)
  assert (m.n_experts, m.top_k, m.expert_ffn_hidden, m.first_dense_layers) == (16, 2, 512, 2)
  assert m.gated_mlp and not m.tied_embeddings and not m.linear_bias
  # 16 x 8 samples in 2 steps; 8,192 tokens / (1,024 assumed prompt + 1,000) = 4 a micro-batch
  assert imp.job.mini_batches == 2
  assert float(imp.plan.roles[0].train.micro_batch) == 8192 // 2024
  assert any("rollout-max-prompt-len" in n for n in imp.not_modelled)


def test_slime_moe_layer_freq_that_is_not_leading_dense_is_refused(tmp_path):
  _write(tmp_path / "scripts" / "models" / "tiny-moe.sh",
         MODEL_FILE.replace('"$MOE_LAYER_FREQ"', "'[1,0,1,1,1,1,1,1,1,1,1,1]'"))
  run = _write(tmp_path / "scripts" / "run-tiny.sh", SLIME_RUN)
  with pytest.raises(ValueError, match="moe-layer-freq"):
    export.read_config("slime", run, response_mean=1000)


def test_model_path_maps_through_the_hf_table():
  # a fine-tune's name shows its base architecture (costmodel.models.from_hf_id)
  from export._src import importing
  spec = importing.model_spec(None, "model", "OpenRLHF/Llama-3-8b-sft-mixture")
  assert spec.total_params == cm.models.from_hf_id("meta-llama/Meta-Llama-3-8B").total_params


_INSTRUCTION = "Follow instructions in https://github.com/{repo}/blob/main/docs/guides/{guide}"


def _guided(tmp_path, guide_text, repo="NVIDIA-NeMo/RL", guide="convert.md", with_guide=True):
  """A checkout-shaped folder: a guide under docs/guides and a config under examples whose
  model path is an instruction linking to it."""
  job, plan, cluster, cfg = _export("nemo_rl", lambda n, j: j.algorithm == "grpo")
  cfg = dict(cfg)
  cfg.pop("defaults", None)
  cfg["policy"] = {**cfg["policy"],
                   "model_name": _INSTRUCTION.format(repo=repo, guide=guide)}
  root = tmp_path / "checkout"
  if with_guide:
    _write(root / "docs" / "guides" / guide, guide_text)
  path = root / "examples" / "configs" / "recipes" / "llm" / "r.yaml"
  path.parent.mkdir(parents=True)
  path.write_text(export.to_yaml(cfg))
  return str(path)


def test_nemo_rl_model_path_that_points_at_its_own_guide_takes_the_one_id_it_names(tmp_path):
  guide = """\
      # Converting the checkpoint
      git clone https://huggingface.co/Qwen/Qwen2.5-7B weights
      python convert.py --from weights   # see https://huggingface.co/datasets/org/corpus too
      """
  imp = export.read_config("nemo_rl", _guided(tmp_path, guide), response_mean=500)
  assert imp.job.actor == cm.models.from_hf_id("Qwen/Qwen2.5-7B")
  assert ("model path is an instruction; the guide docs/guides/convert.md names Qwen/Qwen2.5-7B"
          in imp.not_modelled)
  refused = (r"model: the config's model path 'Follow instructions in .*' is an instruction, "
             r"not a path")
  # two models named: which one the run uses is not stated
  two = guide + "or https://huggingface.co/Qwen/Qwen2.5-14B\n"
  with pytest.raises(ValueError, match=refused):
    export.read_config("nemo_rl", _guided(tmp_path / "a", two), response_mean=500)
  # an id the model table lacks
  unknown = "git clone https://huggingface.co/acme/Nonexistent-Model-9B\n"
  with pytest.raises(ValueError, match=refused):
    export.read_config("nemo_rl", _guided(tmp_path / "b", unknown), response_mean=500)
  # a link into another repository, and a config outside a checkout holding the guide
  with pytest.raises(ValueError, match=refused):
    export.read_config("nemo_rl", _guided(tmp_path / "c", guide, repo="someone/else"),
                       response_mean=500)
  with pytest.raises(ValueError, match=refused):
    export.read_config("nemo_rl", _guided(tmp_path / "d", guide, with_guide=False),
                       response_mean=500)
