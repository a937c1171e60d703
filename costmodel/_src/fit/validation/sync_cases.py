"""Weight-sync, feasibility and memory rows of the published RL tables.

Weight sync (group ``rl_sync``): one sync of the policy from the trainer to
the engines, predicted by :func:`costmodel._src.stages.sync.weight_sync` with
the backend each framework used:

* ``published_rl.csv`` rows 12-13 (veRL fully-async README,
  volcengine/verl@b178a3c): per-tensor NCCL broadcast and the checkpoint
  engine (4,096 MiB buckets of full tensors) between a Megatron trainer and
  vLLM on half of 32 and 128 H20 each;
* ``published_rl_more.csv`` N15-N19 (NeMo-RL
  ``docs/design-docs/nccl-reshard-refit.md``, NVIDIA-NeMo/RL@7ea279ab):
  shard-to-shard reshard from Megatron to vLLM, non-colocated, H100. The
  doc gives each side's layout; the pools are the products of the degrees.

Feasibility (group ``feasibility``): veRL's minimum-resource table
(``docs/perf/device_tuning.rst`` with ``examples/tuning`` @2239fd0, N23-N26):
each recipe runs, so the published value is 1 and the prediction is 1 when
the estimate reports the plan feasible, else 0.

The Qwen2 models of N23-N26 are built from the nearest presets
(``qwen2.5-7b``, ``qwen3-14b``, ``qwen2.5-32b``, ``qwen2.5-72b``).

Memory (group ``memory``): N14's measured engine weights of Qwen2.5-7B on
one H200 GPU (15.4 GB).
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.fit.validation.cases import Case
from costmodel._src.specs import hardware as hw_lib
from costmodel._src.specs import model_presets
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.plan import Plan
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import sync as sync_lib

VERL_SYNC = ("volcengine/verl@b178a3c verl/experimental/fully_async_policy/README.md "
             "(parameter sync table)")
NEMO_REFIT = "NVIDIA-NeMo/RL@7ea279ab docs/design-docs/nccl-reshard-refit.md"
VERL_MIN = ("volcengine/verl@2239fd0 docs/perf/device_tuning.rst, "
            "examples/tuning/*.sh")


def _job(model_name: str, **kwargs) -> RLJob:
  defaults = dict(prompts_per_step=64.0, samples_per_prompt=1.0, prompt_len=256.0,
                  response=ResponseLength.from_mean_max(256.0, 256.0, bins=1))
  defaults.update(kwargs)
  return RLJob("grpo", model_presets.get(model_name), **defaults)


def _sync_time(model_name, gpu, train: Parallel, train_gpus, engine: Engine, gen_gpus, eff):
  cluster = Cluster(hw_lib.get(gpu), 8, max(int(train_gpus + gen_gpus) // 8, 1))
  job = _job(model_name)
  return sync_lib.weight_sync(job.actor, job, train, float(train_gpus), engine,
                              float(gen_gpus), False, cluster, eff).time_s


# (row, model, gpus per side, per-tensor s, checkpoint-engine s)
_VERL_SYNC = (("rl:12", "qwen3-30b-a3b", 16, 15.76, 4.38),
              ("rl:13", "qwen3-235b-a22b", 64, 58.57, 23.7))

# (row, model, train layout, train gpus, engine tp, gen gpus, published mid s, range)
_NEMO = (
    ("rl_more:N15", "qwen3-4b", dict(), 8, 8, 8, 0.275, "0.21-0.34"),
    ("rl_more:N16", "qwen3-30b-a3b", dict(pp=2.0, ep=8.0, zero_stage=1.0), 16, 8, 16, 0.87,
     "0.74-1.00"),
    ("rl_more:N18", "deepseek-v3", dict(pp=16.0, ep=16.0, zero_stage=1.0), 256, 32, 256, 2.61,
     "2.39-2.83"),
)


def sync_cases() -> list[Case]:
  """Published weight-sync times as cases (group ``rl_sync``)."""
  cases = []
  for rid, name, side, per_tensor_s, bucketed_s in _VERL_SYNC:
    train = Parallel(tp=1.0, zero_stage=1.0, ep=8.0 if "a3b" in name or "a22b" in name
                     else 1.0)
    for backend, pub in (("per_tensor", per_tensor_s), ("bucketed", bucketed_s)):
      engine = Engine(tp=4.0 if side > 4 else 1.0, sync_backend=backend)

      def fn(eff, name=name, train=train, side=side, engine=engine):
        return _sync_time(name, "H20", train, side, engine, side, eff)

      cases.append(Case(rid, "rl_sync", f"veRL {backend} sync {name}, {side}+{side} H20",
                        pub, "s", fn, f"{VERL_SYNC}; trainer and engine layouts are not "
                        "published (Megatron EP 8 for MoE, engine TP 4 assumed)"))
  for rid, name, layout, train_gpus, gen_tp, gen_gpus, pub, span in _NEMO:
    train = Parallel(**{"zero_stage": 1.0, **layout})
    engine = Engine(tp=float(gen_tp), sync_backend="reshard")

    def fn(eff, name=name, train=train, tg=train_gpus, engine=engine, gg=gen_gpus):
      return _sync_time(name, "H100", train, tg, engine, gg, eff)

    cases.append(Case(rid, "rl_sync", f"NeMo-RL reshard refit {name}, {train_gpus}+{gen_gpus} "
                      f"H100 to TP{gen_tp}", pub, "s", fn,
                      f"{NEMO_REFIT}; published {span} s, the middle compared"))
  return cases


SKIPPED_MORE = {
    "rl_more:N8 gen": "52.9 s for the tokens N8's update trains on is faster than the 16 "
                      "H20s' peak FLOP/s: the timer cannot cover the whole generation "
                      "(N8's step and update are cases)",
    "rl:11": "7B sync in 0.02 s (checkpoint engine) is 15 GB at 760 GB/s, beyond any link "
             "of the node: the timer cannot cover the whole transfer",
    "rl_more:N17": "FP8 refit (EP8xDP2 -> TP2xDP8): the FP8 conversion path is not modelled",
    "rl_more:N19": "Qwen3.5-397B: no preset, and the GPU count is inferred by the source",
    "rl_more:N20": "checkpoint-engine vs NIXL over RDMA rails: one timer spans a "
                   "non-colocated refit of 288 GPUs with an unpublished bucket pipeline",
    "rl_more:N10": "RollPacker stage fractions: mean response length not published",
    "rl_more:N11": "Seer stage fractions: in-house engine, lengths not published",
    "rl_more:N12": "per-worker rollout times without the model or GPU: the mechanism is "
                   "tested (tests/test_stages.py), the row is not a case",
    "rl_more:N13": "UniRL TP2 vs TP1 ratio without model or GPU: tested as a mechanism",
    "rl_more:N21": "secondary summary of a paywalled article: context only",
    "rl_more:N22": "talk summary: context only",
    "rl_more:N27 0.5b, 3b, 14b": "LoRA max-batch rows of models without a preset (the "
                                 "1.5B, 7B, 32B and 72B rows are group lora_max_batch)",
}


def _min_resource_cases() -> list[Case]:
  """N23-N26: recipes veRL reports to run on the fewest GPUs."""
  rows = (
      # row, model, gpus, gpu, train layout, engine tp, memory fraction, prompt, resp, prompts, n
      ("rl_more:N23", "qwen2.5-7b", 2, "H800",
       Parallel(zero_stage=3.0, recompute=2.0, offload=1.0, micro_batch=16.0), 2, 0.6,
       1024, 1024, 1024, 5),
      ("rl_more:N24", "qwen3-14b", 4, "H800",
       Parallel(zero_stage=3.0, recompute=2.0, offload=1.0, micro_batch=16.0), 4, 0.5,
       1024, 1024, 1024, 5),
      ("rl_more:N25", "qwen2.5-32b", 8, "H20",
       Parallel(tp=8.0, zero_stage=1.0, recompute=2.0, offload=1.0, micro_batch=1.0), 8, 0.6,
       2048, 6144, 512, 5),
      ("rl_more:N26", "qwen2.5-72b", 32, "H800",
       Parallel(zero_stage=3.0, recompute=2.0, offload=1.0, micro_batch=1.0), 16, 0.6,
       512, 512, 1024, 5),
  )
  cases = []
  for rid, name, gpus, gpu, train, etp, frac, prompt, resp, prompts, n in rows:
    job = _job(name, prompts_per_step=float(prompts), samples_per_prompt=float(n),
               prompt_len=float(prompt),
               response=ResponseLength.from_mean_max(0.5 * resp, float(resp)),
               mini_batches=4)
    cluster = Cluster(hw_lib.get(gpu), min(gpus, 8), max(gpus // 8, 1))
    plan = Plan.colocated(job, cluster, train=train,
                          engine=Engine(tp=float(etp), memory_fraction=frac))

    def fits(eff, job=job, plan=plan, cluster=cluster):
      from costmodel._src.step.estimate import estimate  # pylint: disable=g-import-not-at-top
      return jnp.where(estimate(job, plan, cluster, eff).feasible, 1.0, 0.0)

    cases.append(Case(rid, "feasibility", f"veRL minimum resources: {name} GRPO on {gpus} "
                      f"{gpu}", 1.0, "fits", fits,
                      f"{VERL_MIN}; the scripts' offload, checkpointing and engine settings; "
                      "mean response half the maximum (assumed)"))
  return cases


def memory_cases() -> list[Case]:
  """N14: engine weights of Qwen2.5-7B on one GPU (SGLang, veRL colocated)."""
  model = model_presets.get("qwen2.5-7b")

  def weights(eff):
    del eff
    return gen_lib.engine_weight_bytes(model, Engine(tp=1.0), 2.0) / 1e9

  return [Case("rl_more:N14", "memory", "engine weights Qwen2.5-7B, TP1 (H200, SGLang)", 15.4,
               "GB", weights, "hebiao064.github.io/rl-memory-management (2025-06-21)")]


def all_more_cases() -> list[Case]:
  return sync_cases() + _min_resource_cases() + memory_cases()
