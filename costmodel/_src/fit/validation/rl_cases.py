"""Published RL post-training runs as prediction cases.

Each run is rebuilt as an (RLJob, Plan, Cluster) from its launch script (the
source named per run); a published step or stage time becomes a
:class:`~costmodel._src.fit.validation.cases.Case` predicted by
:func:`costmodel.estimate`.

Assumptions shared by every run, stated once because no source publishes
them:

* prompt length: the DAPO-Math and GSM8K-style prompts are short; 256 tokens
  is used where only the maximum (2,048) is given;
* mean response length of the DAPO Qwen2.5-Math-7B runs: only the maximum is
  published (the wandb projects that hold the mean are not public text). It
  is inferred once per group of runs from one anchor stage, the colocated
  run's ``update_actor`` time on the fewest GPUs (training time is linear in
  tokens), with the default efficiency parameters, and separately for the
  group's fully asynchronous runs from theirs (:func:`_dapo28k_runs`); that anchor case is then
  left out of the cases (it is matched, not predicted) and the group's other
  stages and steps are predictions;
* DAPO dynamic sampling is not modelled (over-sampling factor 1);
* veRL's ``timing_s/gen`` of a colocated run includes the engine wake-up and
  the weight reshard, so it is compared with generate + switch + weight sync.
"""

from __future__ import annotations

from typing import NamedTuple


from costmodel._src.fit.validation.cases import Case
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import hardware as hw_lib
from costmodel._src.specs import model_presets
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.plan import Mode
from costmodel._src.specs.plan import Plan
from costmodel._src.specs.plan import Pool
from costmodel._src.specs.plan import RolePlan
from costmodel._src.fit.validation.anchors import VERL_STAGES
from costmodel._src.fit.validation.anchors import sum_stages
from costmodel._src.fit.validation.anchors import infer_mean_response
from costmodel._src.step.estimate import estimate

VERL_FULLY_ASYNC = ("volcengine/verl@b178a3c verl/experimental/fully_async_policy "
                    "(README.md, shell/dapo_7b_math_fsdp2_*.sh)")
VERL_ONE_STEP_OFF = ("volcengine/verl@b178a3c docs/advance/one_step_off.md, "
                     "verl/experimental/one_step_off_policy/shell/dapo_7b_math_*.sh")
VERL_DSV3 = ("volcengine/verl@b178a3c docs/perf/dpsk.md, "
             "examples/grpo_trainer/run_deepseek671b_math_megatron_96gb.sh")
DS_CHAT = ("deepspeedai/DeepSpeedExamples@45b4b71 applications/DeepSpeed-Chat README.md, "
           "training/step3_rlhf_finetuning/BenckmarkSetting.md")

# veRL stage names -> estimate stage names (the published runs are colocated and time
# the weight reshard inside ``gen``).


class Run(NamedTuple):
  """A published run rebuilt for the model."""

  key: str
  label: str
  job: RLJob
  plan: Plan
  cluster: Cluster
  step_s: float | None
  stages_s: dict
  row_ids: tuple[str, ...]
  source: str
  note: str = ""
  scale: float = 1.0  # published value = scale x step time (e.g. an epoch)
  unit: str = "s"


def h20_cluster(gpus: int) -> Cluster:
  return Cluster(hw_lib.get("H20"), 8, gpus // 8)


def _dapo7b_job(response_max: float, samples: float, response_mean: float,
                mini_batch_prompts: float = 32.0) -> RLJob:
  return RLJob("dapo", model_presets.get("qwen2.5-math-7b"), prompts_per_step=512.0,
               samples_per_prompt=samples, prompt_len=256.0,
               response=ResponseLength.from_mean_max(response_mean, response_max),
               mini_batches=int(512 / mini_batch_prompts))


def _fsdp(job: RLJob, cp: float, tokens_per_gpu: float, offload: float = 0.0) -> Parallel:
  seq = 256.0 + float(job.response.mean)
  return Parallel(tp=1.0, pp=1.0, cp=cp, micro_batch=max(1.0, round(tokens_per_gpu * cp / seq)),
                  zero_stage=3.0, recompute=2.0, offload=offload)


def _dapo28k_runs(mean: float, async_mean: float | None = None) -> list[Run]:
  """Rows 1-6: DAPO Qwen2.5-Math-7B, 512 x 16, max response 28,672.

  The colocated runs have no published script: the async scripts' settings
  (rollout TP 4, memory fraction 0.8, Ulysses SP 4, 61,440 tokens per GPU) are
  used for them too. The fully asynchronous runs get their own mean response
  ``async_mean`` (default ``mean``): at the colocated runs' mean, rl:2's
  16-GPU trainer would run its 8,192 samples at 110% of the H20s' peak
  FLOP/s (fwd + bwd + full recompute), and the source notes that the
  asynchronous settings change the response lengths.
  """
  async_mean = mean if async_mean is None else async_mean
  out = []
  pub = {32: (790.1, 357.41, 107.71, 269.8, 294.77, 313.81),
         64: (365.28, 150.72, 70.26, 133.41, 189.26, 156.98),
         128: (356.3, 177.85, 53.92, 113.81, 150.63, 113.16)}
  ids = {32: (1, 2), 64: (3, 4), 128: (5, 6)}
  for gpus, (step, gen, olp, upd, a_step, a_upd) in pub.items():
    job = _dapo7b_job(28672.0, 16.0, mean)
    cluster = h20_cluster(gpus)
    train = _fsdp(job, 4.0, 61440.0)
    # Colocated: actor parameters and optimizer swapped to the host between
    # stages, as in veRL's colocated DAPO scripts
    # (one_step_off_policy/shell/*_colocate.sh: FSDP param_offload and
    # optimizer_offload, the optimizer step on the GPU).
    colocated_train = train.replace(swap=1.0)
    engine = Engine(tp=4.0, memory_fraction=0.8, max_seqs=1024.0)
    out.append(Run(f"verl-dapo7b-colocated-{gpus}", f"veRL DAPO 7B colocated, {gpus} H20",
                   job, Plan.colocated(job, cluster, train=colocated_train, engine=engine),
                   cluster,
                   step, {"gen": gen, "old_log_prob": olp, "update_actor": upd},
                   (f"rl:{ids[gpus][0]}",), VERL_FULLY_ASYNC,
                   f"mean response {mean:.0f} (inferred); colocated settings assumed equal "
                   "to the async scripts' with the colocated scripts' actor offload"))
    half = gpus // 2
    job = _dapo7b_job(28672.0, 16.0, async_mean)
    train = _fsdp(job, 4.0, 61440.0)
    staleness_plan = Plan(
        pools=(Pool("gen", float(half)), Pool("train", float(half))),
        roles=(RolePlan("actor", "train", train=train),),
        engine=engine, rollout_pool="gen",
        mode=Mode(staleness=1, staleness_threshold=0.5, partial_rollout=True, require_batches=4,
                  rollout_log_probs=True))
    out.append(Run(f"verl-dapo7b-async-{gpus}", f"veRL DAPO 7B fully async {half}+{half} H20",
                   job, staleness_plan, cluster, a_step, {"update_actor": a_upd},
                   (f"rl:{ids[gpus][1]}",), VERL_FULLY_ASYNC,
                   f"mean response {async_mean:.0f} (inferred); the doc's settings: staleness "
                   "threshold 0.5, partial rollouts, require_batches 4, trigger_parameter_"
                   "sync_step 4, old log-probs from the rollout"))
  return out


def _one_step_off_runs(mean: float) -> list[Run]:
  """Rows 14-17: one-step-off, 16 H20, 512 prompts, max response 8,192."""
  out = []
  for rid, label, colocated, megatron, samples, step, stages in (
      (14, "FSDP2 colocated", True, False, 12.0, 749.0,
       {"gen": 321.0, "old_log_prob": 88.0, "update_actor": 286.0}),
      (15, "FSDP2 one-step-off 4+12", False, False, 12.0, 520.0,
       {"old_log_prob": 108.0, "update_actor": 337.0}),
      (16, "Megatron colocated", True, True, 16.0, 699.0,
       {"gen": 207.0, "old_log_prob": 119.0, "update_actor": 344.0}),
      (17, "Megatron one-step-off 4+12", False, True, 12.0, 566.0,
       {"old_log_prob": 120.0, "update_actor": 347.0})):
    job = _dapo7b_job(8192.0, samples, mean)
    cluster = h20_cluster(16)
    if megatron:
      # Megatron param/grad/optimizer offload: swapped between stages. No
      # recompute: the scripts set none and veRL's Megatron engine defaults to
      # ``recompute_granularity: null`` (verl/trainer/config/engine/megatron.yaml).
      train = Parallel(tp=2.0, pp=2.0, micro_batch=2.0, zero_stage=1.0, recompute=0.0,
                       swap=1.0 if colocated else 0.0)
      infer = train.replace(micro_batch=4.0)
    else:
      train = _fsdp(job, 4.0, 20480.0).replace(swap=1.0 if colocated else 0.0)
      infer = _fsdp(job, 4.0, 30720.0)
    engine = Engine(tp=2.0, memory_fraction=0.8, max_seqs=1024.0)
    if colocated:
      plan = Plan.colocated(job, cluster, train=train, infer=infer, engine=engine)
    else:
      plan = Plan(pools=(Pool("gen", 4.0), Pool("train", 12.0)),
                  roles=(RolePlan("actor", "train", train=train, infer=infer),),
                  engine=engine, rollout_pool="gen", mode=Mode(staleness=1))
    out.append(Run(f"verl-one-step-off-{rid}", f"veRL one-step-off DAPO 7B {label}, 16 H20",
                   job, plan, cluster, step, stages, (f"rl:{rid}",), VERL_ONE_STEP_OFF,
                   f"mean response {mean:.0f} (inferred); max response 8,192 as in every "
                   "script (the doc's 20,480 for FSDP2 is not backed by one)"))
  return out


def _dapo28k_async_runs(mean: float) -> list[Run]:
  """The fully asynchronous runs of rows 1-6 at mean response ``mean``."""
  return [r for r in _dapo28k_runs(mean) if "-async-" in r.key]


ANCHORS = {
    # group builder, anchor run, anchor stage
    "dapo28k": (_dapo28k_runs, "verl-dapo7b-colocated-32", "update_actor"),
    "dapo28k_async": (_dapo28k_async_runs, "verl-dapo7b-async-32", "update_actor"),
    "one_step_off": (_one_step_off_runs, "verl-one-step-off-14", "update_actor"),
}


def _dsv3_run() -> Run:
  dsv3 = model_presets.get("deepseek-v3")
  job = RLJob("grpo", dsv3, prompts_per_step=96.0, samples_per_prompt=8.0, prompt_len=256.0,
              response=ResponseLength.from_mean_max(1960.0, 9632.0), mini_batches=3)
  cluster = h20_cluster(96)
  # optimizer_cpu_offload with fraction 1 (Megatron's CPU Adam) and
  # param/grad offload between stages.
  train = Parallel(tp=8.0, pp=12.0, ep=8.0, micro_batch=4.0, zero_stage=1.0, recompute=2.0,
                   offload=1.0, swap=1.0)
  engine = Engine(tp=32.0, memory_fraction=0.6, max_seqs=1024.0, cuda_graphs=False)
  return Run("verl-dsv3-96", "veRL GRPO DeepSeek-V3 671B colocated, 96 H20", job,
             Plan.colocated(job, cluster, train=train, engine=engine), cluster, 1700.0,
             {"gen": 1050.0}, ("rl:18",), VERL_DSV3,
             "published 'rollout' (1,050 s) compared with generate + switch + sync; the "
             "engine runs eager (the script's enforce_eager=True) over 4 nodes")


DS_CHAT_LORA_ROWS = {"rl:103": 0.5, "rl:104": 0.5, "rl:110": 0.75}
"""DeepSpeed-Chat rows whose scripts train a LoRA actor -> the engine's share of HBM."""


def dschat_runs() -> list[Run]:
  """Rows 100-110: DeepSpeed-Chat PPO epochs (264,292 samples of 256 + 256
  tokens); batch per step at the 1,024-pair cap; ZeRO-3, hybrid engine.

  Every row as full fine-tuning; the rows of :data:`DS_CHAT_LORA_ROWS` are
  predicted as LoRA runs by :mod:`~costmodel._src.fit.validation.lora_cases`.
  """
  out = []
  critic = model_presets.get("opt-350m")
  tp_by_size = {"1.3b": 1, "6.7b": 1, "13b": 2, "30b": 4, "66b": 8, "175b": 8}
  epochs = {8: {"1.3b": 1.4 * 3600, "6.7b": 4.1 * 3600, "13b": 9 * 3600, "30b": 18 * 3600,
                "66b": 2.1 * 86400},
            64: {"1.3b": 31 * 60, "6.7b": 51 * 60, "13b": 1.25 * 3600, "30b": 4 * 3600,
                 "66b": 7.5 * 3600, "175b": 20 * 3600}}
  rid = iter(range(100, 111))
  for gpus, table in epochs.items():
    for size, seconds in table.items():
      actor = model_presets.get(f"opt-{size}")
      job = RLJob("ppo", actor, critic=critic, reward_model=critic, prompts_per_step=1024.0,
                  samples_per_prompt=1.0, prompt_len=256.0,
                  response=ResponseLength.from_mean_max(256.0, 256.0, bins=1))
      cluster = Cluster(hw_lib.get("A100-80GB"), 8, gpus // 8)
      ckpt = 2.0 if size != "1.3b" else 0.0
      train = Parallel(micro_batch=4.0 if gpus == 64 else 2.0, zero_stage=3.0, recompute=ckpt)
      tp = tp_by_size[size]
      plan = Plan.colocated(job, cluster, train=train,
                            critic=Parallel(micro_batch=4.0, zero_stage=3.0),
                            engine=Engine(tp=float(tp), memory_fraction=0.5,
                                          prefix_caching=False, cuda_graphs=False),
                            mode=Mode(single_controller=False))
      steps = 264292.0 / 1024.0
      out.append(Run(f"dschat-{size}-{gpus}",
                     f"DeepSpeed-Chat PPO OPT-{size} + 350M, {gpus} A100",
                     job, plan, cluster, seconds, {}, (f"rl:{next(rid)}",), DS_CHAT,
                     "1,024 pairs per step (the documented cap), 258 steps per epoch; "
                     "per-config batch, ZeRO stage and inference TP are not published; "
                     "generation is DeepSpeed's hybrid-engine generate() loop in eager mode",
                     scale=steps, unit="s/epoch"))
  return out


_CACHE: dict = {}


def inferred_means() -> dict[str, float]:
  """Mean response length inferred per group (cached)."""
  if "means" not in _CACHE:
    _CACHE["means"] = {g: infer_mean_response(*a) for g, a in _anchors().items()}
  return _CACHE["means"]


def anchor_case_labels() -> set[str]:
  """Labels of the cases used to infer a missing input (not predictions)."""
  out = set()
  for build, key, stage in _anchors().values():
    run = next(r for r in build(1000.0) if r.key == key)
    out.add(f"{run.label}: {stage}")
  return out


def _anchors() -> dict:
  from costmodel._src.fit.validation import async_cases  # pylint: disable=g-import-not-at-top
  return {**ANCHORS, "dapo10k": async_cases.ANCHOR, "dapo10k_async": async_cases.ASYNC_ANCHOR}


def runs() -> list[Run]:
  """Every published RL run with a usable configuration.

  DeepSpeed-Chat's runs whose scripts train a LoRA actor (rows 103, 104 and
  110) are predicted as LoRA runs (group ``rl_lora``,
  :mod:`~costmodel._src.fit.validation.lora_cases`), not as the full
  fine-tuning their scripts do not run.
  """
  from costmodel._src.fit.validation import async_cases  # pylint: disable=g-import-not-at-top
  means = inferred_means()
  full = [r for r in dschat_runs() if r.row_ids[0] not in DS_CHAT_LORA_ROWS]
  return (_dapo28k_runs(means["dapo28k"], means["dapo28k_async"])
          + _one_step_off_runs(means["one_step_off"])
          + [_dsv3_run()] + full + async_cases.ablation_runs(means["dapo28k_async"])
          + async_cases.validate_pair_runs(means["dapo10k"], means["dapo10k_async"]))


_LAST: dict = {}


def shared_estimate(job: RLJob, plan: Plan, cluster: Cluster, eff: Efficiency):
  """``estimate(job, plan, cluster, eff)``, computed once per (run, eff) object.

  Several cases of one run (its step and each stage) are predicted from the
  same estimate; inside one traced loss they share it instead of tracing the
  model once per case.
  """
  key = (id(job), id(plan), id(cluster))
  hit = _LAST.get(key)
  if hit is not None and hit[0] is eff:
    return hit[1]
  est = estimate(job, plan, cluster, eff)
  _LAST[key] = (eff, est)
  return est


def run_cases(run: Run) -> list[Case]:
  """The step and stage cases of one run."""
  cases = []

  def step(eff: Efficiency, run=run):
    return shared_estimate(run.job, run.plan, run.cluster, eff).step_time_s * run.scale

  if run.step_s is not None:
    cases.append(Case(run.row_ids[0], "rl_step", run.label, run.step_s, run.unit, step,
                      run.note))
  for stage, value in run.stages_s.items():
    names = VERL_STAGES[stage]

    def stage_fn(eff: Efficiency, run=run, names=names):
      return sum_stages(shared_estimate(run.job, run.plan, run.cluster, eff), names)

    cases.append(Case(run.row_ids[0], "rl_stage", f"{run.label}: {stage}", value, "s",
                      stage_fn, run.note))
  return cases


def all_rl_cases() -> list[Case]:
  """Every run's step and stage cases but the anchors' stages (matched to
  infer a missing input, not predicted: :func:`anchor_case_labels`)."""
  anchors = anchor_case_labels()
  return [c for r in runs() for c in run_cases(r) if c.label not in anchors]


SKIPPED_RL = {
    "rl:7": "Qwen3-30B-A3B colocated: Megatron layout and rollout TP not published",
    "rl:8": "Qwen3-30B-A3B fully async: mean response length not published; kept out "
            "with its colocated twin",
    "rl:11": "see SKIPPED_MORE (rows 12-13 are weight-sync cases, group rl_sync)",
    "rl:19-21": "MFU-only rows without lengths or batch",
    "rl:168-175": "headline claims without configuration",
    "rl:103, rl:104, rl:110 (full fine-tuning)": "the scripts of these sizes train a LoRA "
                                                 "actor: predicted as LoRA runs (group rl_lora)",
    "update_actor of rl:1, rl:2, rl:14, rl_more:N8, rl_more:N9, rl:9, rl:10": (
        "anchors: matched to infer their group's unpublished mean response (colocated and "
        "fully asynchronous runs separately), not predictions"),
}
