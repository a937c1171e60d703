"""veRL's fully-asynchronous ablations (``published_rl_more.csv`` N1-N9).

Source: volcengine/verl ``docs/advance/fully_async.md`` (the rows' commit
1dda039b; the scripts at b178a3c,
``verl/experimental/fully_async_policy/shell/dapo_7b_math_fsdp2_64_64.sh``):
DAPO on Qwen2.5-Math-7B, 512 prompts x 16 per step (a step is one parameter
sync: ``trigger_parameter_sync_step x require_batches x ppo_mini_batch_size``
= 4 x 4 x 32 prompts), FSDP2 trainer with Ulysses SP 4, vLLM TP 4 rollout,
the old log-probs taken from the rollout (``use_rollout_log_probs``).

* N1-N7: 128 H20 split 64:64, maximum response 28,672 (the mean is the one
  inferred for the colocated runs of the same recipe, rows rl:1-6):
  streaming on-policy (N1, staleness 0), staleness thresholds 0.1-0.5 with
  partial rollouts (N2-N4) and require_batches 1, 2, 4 (N5-N7, the calls per
  sync adjusted so a step stays 512 prompts);
* N8-N9: 16 H20, maximum response 10,240, colocated vs 8:8 fully async
  (staleness 0.5, partial). The mean response is inferred per mode, as for
  rows rl:1-6: N8's from its ``update_actor`` (anchor ``dapo10k``), N9's from
  its own (anchor ``dapo10k_async``): at N8's mean, N9's 8-GPU trainer would
  run at 135% of the H20s' peak FLOP/s (fwd + bwd + full recompute,
  attention at the length-biased context).

The source notes that require_batches and staleness change the response
lengths during training, so N3-N7 carry that confound. N8's ``gen`` (52.9 s)
is left out: for the tokens its update trains on, it would decode faster than
the 16 H20s' peak FLOP/s allow, so it cannot time the whole generation.
"""

from __future__ import annotations

from costmodel._src.fit.validation import rl_cases
from costmodel._src.specs import model_presets
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.plan import Mode
from costmodel._src.specs.plan import Plan
from costmodel._src.specs.plan import Pool
from costmodel._src.specs.plan import RolePlan

VERL_ASYNC_DOC = ("volcengine/verl@1dda039b docs/advance/fully_async.md; scripts "
                  "@b178a3c verl/experimental/fully_async_policy/shell/"
                  "dapo_7b_math_fsdp2_*.sh")


def _job(response_max: float, mean: float) -> RLJob:
  return RLJob("dapo", model_presets.get("qwen2.5-math-7b"), prompts_per_step=512.0,
               samples_per_prompt=16.0, prompt_len=256.0,
               response=ResponseLength.from_mean_max(mean, response_max), mini_batches=16)


def _fsdp(job: RLJob, tokens_per_gpu: float, swap: float = 0.0) -> Parallel:
  seq = 256.0 + float(job.response.mean)
  return Parallel(tp=1.0, pp=1.0, cp=4.0, micro_batch=max(1.0, round(tokens_per_gpu * 4 / seq)),
                  zero_stage=3.0, recompute=2.0, swap=swap)


def _split(job: RLJob, gen: int, train: int, mode: Mode, tokens_per_gpu: float) -> Plan:
  return Plan(pools=(Pool("gen", float(gen)), Pool("train", float(train))),
              roles=(RolePlan("actor", "train", train=_fsdp(job, tokens_per_gpu)),),
              engine=Engine(tp=4.0, memory_fraction=0.8, max_seqs=1024.0),
              rollout_pool="gen", mode=mode)


def _async_mode(threshold: float | None, partial: bool, require: int = 4) -> Mode:
  if threshold is None:  # staleness 0: on-policy, streamed
    return Mode(require_batches=require, rollout_log_probs=True)
  return Mode(staleness=1, staleness_threshold=threshold, partial_rollout=partial,
              require_batches=require, rollout_log_probs=True)


# (row, label, staleness threshold or None, partial, require_batches, step, update)
_ABLATIONS = (
    ("N1", "streaming on-policy (staleness 0)", None, False, 4, 231.34, 98.77),
    ("N2", "staleness 0.1, partial rollouts", 0.1, True, 4, 171.30, 109.12),
    ("N3", "staleness 0.3, partial rollouts", 0.3, True, 4, 146.11, 103.22),
    ("N5", "require_batches 1", 0.5, True, 1, 203.47, 181.08),
    ("N6", "require_batches 2", 0.5, True, 2, 158.72, 128.08),
    ("N7", "require_batches 4", 0.5, True, 4, 124.64, 95.06),
)


def ablation_runs(mean: float) -> list[rl_cases.Run]:
  """N1-N7 (N4 is row rl:6, already a case)."""
  cluster = rl_cases.h20_cluster(128)
  out = []
  for rid, label, thr, partial, require, step, update in _ABLATIONS:
    job = _job(28672.0, mean)
    plan = _split(job, 64, 64, _async_mode(thr, partial, require), 61440.0)
    out.append(rl_cases.Run(
        f"verl-async-ablation-{rid}", f"veRL fully async 64:64 H20, {label}", job, plan,
        cluster, step, {"update_actor": update}, (f"rl_more:{rid}",), VERL_ASYNC_DOC,
        f"mean response {mean:.0f} (inferred for rl:1-6); a step is 512 prompts"))
  return out


def validate_pair_runs(mean: float, async_mean: float | None = None) -> list[rl_cases.Run]:
  """N8 (colocated, 16 H20) and N9 (8:8 fully async, mean response ``async_mean``,
  default ``mean``), maximum response 10,240."""
  async_mean = mean if async_mean is None else async_mean
  cluster = rl_cases.h20_cluster(16)
  job = _job(10240.0, mean)
  tokens = 3.0 * (2048.0 + 10240.0)  # the scripts' (prompt + response) x 3 per GPU
  colocated = Plan.colocated(job, cluster, train=_fsdp(job, tokens, swap=1.0),
                             engine=Engine(tp=4.0, memory_fraction=0.8, max_seqs=1024.0),
                             mode=Mode(rollout_log_probs=True))
  async_job = _job(10240.0, async_mean)
  split = _split(async_job, 8, 8, _async_mode(0.5, True), tokens)
  return [rl_cases.Run("verl-async-16-colocated", "veRL DAPO 7B colocated, 16 H20 (10k)", job,
                       colocated, cluster, 484.623, {"update_actor": 430.263},
                       ("rl_more:N8",), VERL_ASYNC_DOC,
                       f"mean response {mean:.0f} (inferred from N8's update_actor)"),
          rl_cases.Run("verl-async-16-split", "veRL DAPO 7B fully async 8:8 H20 (10k)",
                       async_job, split, cluster, 489.953, {"update_actor": 435.874},
                       ("rl_more:N9",), VERL_ASYNC_DOC,
                       f"mean response {async_mean:.0f} (inferred from N9's update_actor)")]


def _validate_pair_async_runs(mean: float) -> list[rl_cases.Run]:
  return [r for r in validate_pair_runs(mean) if r.key == "verl-async-16-split"]


ANCHOR = (validate_pair_runs, "verl-async-16-colocated", "update_actor")
ASYNC_ANCHOR = (_validate_pair_async_runs, "verl-async-16-split", "update_actor")
