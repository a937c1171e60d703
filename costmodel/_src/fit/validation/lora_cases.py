"""Published runs that train the actor with LoRA.

* DeepSpeed-Chat OPT-30B and OPT-66B on 8 A100 (rows rl:103, rl:104) and
  OPT-175B on 64 A100 (rl:110): the scripts of those sizes
  (``training_scripts/opt/single_node/run_30b_lora.sh``,
  ``opt/multi_node/run_66b.sh`` in microsoft/DeepSpeedExamples) train the actor
  with ``--actor_lora_dim 128 --actor_lora_module_name decoder.layers.``: every
  linear layer of the decoder blocks. Those scripts do not pass
  ``--only_optimize_lora``; the runs are modelled with a frozen base, the only
  way the model finds for these sizes to fit. DeepSpeed-Chat loads its own
  reference copy and the hybrid engine fuses the adapters into the weights
  before generation (``fuse_lora_weight``), so the reference is not shared
  and the sync moves merged weights. OPT-175B's engine weights at inference
  TP 8 (43.75 GB per GPU) exceed half of the 80 GB HBM the other runs give the
  engine; its run gives the engine 75%.
* veRL's minimum-resource LoRA table (``docs/perf/device_tuning.rst`` and
  ``examples/tuning/*/qwen2-*_grpo-lora_*_h100_fsdp_vllm.sh`` at
  verl-project/verl@2239fd0, row N27 of ``published_rl_more.csv``): GRPO-LoRA,
  rank 32 on all linear layers, FSDP with parameter and optimizer offload and
  gradient checkpointing, 512 + 1024 tokens, 5 samples per prompt, one
  mini-batch of the whole batch, micro-batches of ``train_batch_size /
  n_gpus`` sequences per GPU (``ppo_micro_batch_size`` equals the mini-batch
  in prompts), vLLM with the scripts' memory fraction and TP. ``MaxBatch`` is
  the scripts' ``train_batch_size`` (``nproc_per_gpu x n_gpus``). The
  presets cover Qwen2.5-1.5B, 7B, 32B and 72B; the 0.5B, 3B and 14B rows are
  left out. The 7B script's comment records 100 as the largest batch that ran
  while the table and script say 16; 100 is compared. The 7B script
  (volcengine/verl@3f388066192c138aa19338f49accbe8bb9f72f33
  ``examples/tuning/7b/qwen2-7b_grpo-lora_1_h100_fsdp_vllm.sh``) sets
  ``max_num_batched_tokens=1536`` and ``max_num_seqs=512``: the engine's
  workspace is its profile run's
  (:func:`costmodel._src.stages.generate.workspace_bytes`); the other rows
  keep the fixed workspace.
"""

from __future__ import annotations

from typing import NamedTuple

from costmodel._src.fit.validation import rl_cases
from costmodel._src.fit.validation.cases import Case
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.ops.lora import LoRA
from costmodel._src.specs import hardware as hw_lib
from costmodel._src.specs import model_presets
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.plan import Plan
from costmodel._src.step.estimate import estimate

DS_CHAT_LORA = LoRA(128.0, targets=("q", "k", "v", "o", "gate", "up", "down"),
                    shared_reference=False, sync="merged")
VERL_LORA = LoRA(32.0)
VERL_TUNING = ("verl-project/verl@2239fd0 docs/perf/device_tuning.rst, "
               "examples/tuning/*/qwen2-*_grpo-lora_*_h100_fsdp_vllm.sh")


def dschat_lora_runs() -> list[rl_cases.Run]:
  """The DeepSpeed-Chat rows that fit only with a LoRA actor."""
  out = []
  for run in rl_cases.dschat_runs():
    rid = run.row_ids[0]
    if rid not in rl_cases.DS_CHAT_LORA_ROWS:
      continue
    fraction = rl_cases.DS_CHAT_LORA_ROWS[rid]
    plan = run.plan.replace(engine=run.plan.engine.replace(memory_fraction=fraction))
    out.append(run._replace(key=run.key + "-lora", label=run.label + " (LoRA 128)",
                            job=run.job.replace(lora=DS_CHAT_LORA), plan=plan,
                            note=run.note + "; actor LoRA rank 128 on decoder.layers., base "
                            "frozen (assumed), separate reference, merged sync"))
  return out


class MaxBatchRow(NamedTuple):
  """A veRL minimum-resource LoRA row: the largest batch that fits."""

  row_id: str
  model: str
  gpus: int
  engine_tp: float
  memory_fraction: float
  published: int
  max_batched_tokens: float | None = None


VERL_ROWS = (
    MaxBatchRow("N27:1.5b", "qwen2.5-1.5b", 1, 1.0, 0.1, 128),
    MaxBatchRow("N27:7b", "qwen2.5-7b", 1, 1.0, 0.2, 100, 1536.0),
    MaxBatchRow("N27:32b", "qwen2.5-32b", 4, 4.0, 0.3, 180),
    MaxBatchRow("N27:72b", "qwen2.5-72b", 8, 8.0, 0.4, 176))


def verl_lora_setup(row: MaxBatchRow, prompts: int) -> tuple[RLJob, Plan, Cluster]:
  """The row's job, plan and cluster at ``prompts`` prompts per step."""
  job = RLJob("grpo", model_presets.get(row.model), prompts_per_step=float(prompts),
              samples_per_prompt=5.0, prompt_len=512.0,
              response=ResponseLength.from_mean_max(1024.0, 1024.0, bins=1), lora=VERL_LORA)
  cluster = Cluster(hw_lib.get("H100"), row.gpus, 1)
  train = Parallel(micro_batch=max(1.0, prompts / row.gpus), zero_stage=3.0, recompute=2.0,
                   offload=1.0)
  engine = Engine(tp=row.engine_tp, memory_fraction=row.memory_fraction, max_seqs=512.0,
                  max_batched_tokens=row.max_batched_tokens)
  return job, Plan.colocated(job, cluster, train=train, engine=engine), cluster


def fits(row: MaxBatchRow, prompts: int, eff: Efficiency | None = None) -> bool:
  job, plan, cluster = verl_lora_setup(row, prompts)
  return bool(estimate(job, plan, cluster, eff).feasible)


def predicted_max_batch(row: MaxBatchRow, hi: int = 2048, eff: Efficiency | None = None) -> int:
  """The largest prompts per step (a multiple of the GPU count) that fits."""
  lo = 0
  hi = hi // row.gpus
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if fits(row, mid * row.gpus, eff):
      lo = mid
    else:
      hi = mid - 1
  return lo * row.gpus


def cases() -> list[Case]:
  """The LoRA rows as prediction cases: the DeepSpeed-Chat epochs (group
  ``rl_lora``) and veRL's largest batches (group ``lora_max_batch``)."""
  out = []
  for run in dschat_lora_runs():
    out += [c._replace(group="rl_lora") for c in rl_cases.run_cases(run)]
  for row in VERL_ROWS:
    out.append(Case(row.row_id, "lora_max_batch",
                    f"veRL GRPO-LoRA {row.model}, {row.gpus} H100: largest batch", row.published,
                    "prompts", lambda eff, row=row: float(predicted_max_batch(row, eff=eff)),
                    VERL_TUNING))
  return out
