"""Plans the GPU layout of an RL post-training job.

With no flags: GRPO on Qwen2.5-7B, prompts of 1,024 tokens, responses of mean
2,000 and max 8,192 tokens, 512 prompts x 8 samples, on 8 nodes x 8 H100.
Prints the top plans, the best plan's stage breakdown and the rules of thumb;
``--out`` writes the best plan as JSON. Exits with status 1 when no layout
fits, naming the stage that does not.

  rlcost-plan --model llama-3.1-8b --nodes 4 --algorithm ppo --out plan.json
  python -m search.plan --starts 8 --steps 30 --families split
  rlcost-plan --from_verl run.sh --response_mean 900 --out plan.json --export verl

``--from_verl`` / ``--from_openrlhf`` / ``--from_nemo_rl`` / ``--from_slime`` /
``--from_areal`` start from a run
the user has: its job and cluster are searched, and the plans faster than it
are printed as the settings to change.
"""

from __future__ import annotations

import sys

from absl import flags

import costmodel as cm
import search
from search import beyond_flags
from search._src import cli
from search._src import framework_settings
from search._src import html_report
from search._src import optimize as optimize_lib
from search._src import report

_MODEL = flags.DEFINE_string("model", "qwen2.5-7b", "Model preset (costmodel.models.names()).")
_CONFIG_JSON = flags.DEFINE_string(
    "config_json", None, "Hugging Face config.json of the model (overrides --model).")
_REWARD_MODEL = flags.DEFINE_string(
    "reward_model", None, "Reward-model preset (default: a rule-based reward on CPU).")
_GPU = flags.DEFINE_string("gpu", "H100", "Accelerator preset.")
_NODES = flags.DEFINE_integer("nodes", 8, "Nodes.")
_GPUS_PER_NODE = flags.DEFINE_integer("gpus_per_node", 8, "GPUs per node.")
_ALGORITHM = flags.DEFINE_string("algorithm", "grpo", "ppo, grpo, dapo, reinforce_pp, rloo, remax.")
_PROMPT_LEN = flags.DEFINE_float("prompt_len", 1024, "Prompt tokens.")
_RESPONSE_MEAN = flags.DEFINE_float("response_mean", 2000, "Mean response tokens.")
_RESPONSE_MAX = flags.DEFINE_float("response_max", 8192, "Longest response tokens.")
_PROMPTS = flags.DEFINE_float("prompts", 512, "Prompts per step.")
_SAMPLES = flags.DEFINE_float("samples", 8, "Samples per prompt.")
_FAMILIES = flags.DEFINE_list("families", None,
                              f"Families to search ({', '.join(search.FAMILIES)}).")
_STARTS = flags.DEFINE_integer("starts", optimize_lib.DEFAULT_STARTS, "Random starts per family.")
_DP_SEEDS = flags.DEFINE_boolean(
    "dp_seeds", True, "Start the discrete phase from the cut DP's candidates too "
    "(--nodp_seeds: the rounded relaxed solutions only).")
_STEPS = flags.DEFINE_integer("steps", 100, "Relaxed optimisation steps.")
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.")
_TOP_K = flags.DEFINE_integer("top_k", 5, "Plans to print.")
_OUT = flags.DEFINE_string("out", None, "Write the best plan as JSON to this path.")
_CACHE = flags.DEFINE_string(
    "compilation_cache_dir", None,
    "Persistent JAX compilation cache (later runs of the same job shape skip compilation); "
    "default $RLCOST_JAX_CACHE or ~/.cache/rlcost/jax, 'off' switches it off.")
_FRAMEWORK = flags.DEFINE_enum(
    "framework", "any", ["any", "verl", "openrlhf", "nemo_rl", "slime", "areal"],
    "Search only plans this framework can run (any: the framework-neutral rules).")
_MAX_STALENESS = flags.DEFINE_integer(
    "max_staleness", 0, "Largest staleness allowed (0: on-policy, synchronous).")
_PARTIAL = flags.DEFINE_boolean(
    "partial_rollout", False, "Allow partial rollouts (needs --max_staleness >= 1).")
_RELAXED = flags.DEFINE_enum(
    "relaxed", "auto", list(optimize_lib.RELAXED),
    f"The relaxed (gradient) phase; auto: on when a family's space holds at least "
    f"{optimize_lib.RELAX_MIN_PLANS:.0e} value vectors or with --nodp_seeds (smaller spaces: "
    "the discrete phases alone found the same plans).")
_ROLLOUT_PRECISION = flags.DEFINE_list(
    "rollout_precision", ["bf16"], "Rollout engine formats allowed (bf16, fp8: FP8 weights and "
    "KV cache, on GPUs with an FP8 peak); FP8 changes the sampling numerics, so it is opt-in.")


def main(argv) -> int:
  del argv
  cli.check_outputs(_OUT.value)
  start = cli.source()
  if start is not None:
    current = cli.import_run(*start)
    job, cluster = current.job, current.cluster
    job = beyond_flags.apply_job_flags(job)
  else:
    actor = (cm.ModelSpec.from_hf_config(_CONFIG_JSON.value) if _CONFIG_JSON.value
             else cm.models.get(_MODEL.value))
    job = cm.RLJob(
        _ALGORITHM.value, actor, prompts_per_step=_PROMPTS.value,
        samples_per_prompt=_SAMPLES.value, prompt_len=_PROMPT_LEN.value,
        response=cm.ResponseLength.from_mean_max(_RESPONSE_MEAN.value, _RESPONSE_MAX.value),
        reward_model=cm.models.get(_REWARD_MODEL.value) if _REWARD_MODEL.value else None,
        **cli.job_options(_ALGORITHM.value))
    job = beyond_flags.apply_job_flags(job)
    if beyond_flags.wants_cost_run():
      return beyond_flags.run_cost(job, _GPUS_PER_NODE.value)
    cluster = cm.Cluster(cm.hardware.get(_GPU.value), gpus_per_node=_GPUS_PER_NODE.value,
                         nodes=_NODES.value)
  print(report.format_job(job, cluster), flush=True)
  mode = dict(max_staleness=_MAX_STALENESS.value, partial_rollout=_PARTIAL.value)
  try:
    result = search.optimize(job, cluster, families=_FAMILIES.value, starts=_STARTS.value,
                             steps=_STEPS.value, seed=_SEED.value, top_k=_TOP_K.value,
                             progress=True, framework=_FRAMEWORK.value,
                             compilation_cache=_CACHE.value,
                             rollout_precision=tuple(_ROLLOUT_PRECISION.value),
                             dp_seeds=_DP_SEEDS.value, relaxed=_RELAXED.value, **mode)
  except ValueError as e:
    print(e, file=sys.stderr)
    return 2
  if not result.feasible and not result.best_by_family_s:  # every family was skipped
    cli.fail(f"no plan on {cluster.nodes} x {cluster.gpus_per_node} "
             f"{cluster.accelerator.name}: " + "; ".join(result.skipped.values()))
  rules = (search.rules_of_thumb(job, cluster, framework=_FRAMEWORK.value, **mode)
           if result.feasible else ())
  print(report.format_result(result, rules), flush=True)
  if start is not None:
    step = float(cm.estimate(job, current.plan, cluster).step_time_s)
    print(framework_settings.format_better(start[0], current.plan, step, result, job, cluster))
  if not result.feasible:
    print(f"no layout fits: {result.infeasible_reason}", file=sys.stderr)
    return 1
  if _OUT.value:
    search.write_plan(_OUT.value, result.best_plan, result.best_estimate, result.family,
                      job=job, cluster=cluster)
    print(f"wrote {_OUT.value}")
    if cli.exports_requested():
      print("\n".join(cli.write_exports(_OUT.value, result.best_plan, job, cluster)))
  if cli.report_path():
    html_report.write(cli.report_path(), job, cluster, result.best_plan, result.best_estimate,
                      rules, title=f"rlcost plan ({result.family})")
    print(f"wrote {cli.report_path()}")
  return 0


def run():
  """Console entry point (``rlcost-plan``)."""
  cli.run(main)


if __name__ == "__main__":
  run()
