"""Plans the GPU layout of an RL post-training job.

rlcost-plan searches the placements (which GPUs generate, which train), the
parallel degrees and the engines' settings of an RL job on a cluster, and
prints the fastest plans, the best plan's stage breakdown, the rules of
thumb for comparison and how to run the best plan.

With no flags: GRPO on Qwen2.5-7B, prompts of 1,024 tokens, responses of mean
2,000 and max 8,192 tokens, 512 prompts x 8 samples, on 8 nodes x 8 H100.
Exit status: 0 with a plan; 1 when no layout fits in memory (naming the stage
that does not); 2 on bad input or a job no family can hold (one line on stderr).

Examples:
  rlcost-plan --model llama-3.1-8b --nodes 4 --algorithm ppo --out plan.json
  rlcost-plan --nodes 2 --framework verl --out plan.json --export verl --report plan.html
  rlcost-plan --from_verl run.sh --response_mean 900 --out plan.json --export verl
  rlcost-plan --prices examples/prices.yaml --size_nodes 1,2,4 --target_step_s 120

--from_verl / --from_openrlhf / --from_nemo_rl / --from_slime / --from_areal
start from a run you have: its job and cluster are searched in that
framework's space, and the faster plans are printed as the changes to its
settings, in its own keys.
"""

from __future__ import annotations

from absl import flags

import costmodel as cm
import export
import search
from search import beyond_flags
from search._src import cli
from search._src import framework_settings
from search._src import frameworks as fw_lib
from search._src import html_report
from search._src import optimize as optimize_lib
from search._src import report
from search._src import space as space_lib
from search._src import speculative_option

_NODES = flags.DEFINE_integer("nodes", 8, "Nodes.", lower_bound=1)
_ALGORITHM = flags.DEFINE_enum("algorithm", "grpo", list(cm.ALGORITHMS), "The RL algorithm.")
_RESPONSE_MAX = flags.DEFINE_integer("response_max", 8192, "Longest response tokens.",
                                     lower_bound=1)
_PROMPTS = flags.DEFINE_integer("prompts", 512, "Prompts per step.", lower_bound=1)
_SAMPLES = flags.DEFINE_integer("samples", 8, "Samples per prompt.", lower_bound=1)
_FAMILIES = flags.DEFINE_list("families", None,
                              f"Families to search ({', '.join(search.FAMILIES)}).")
_STARTS = flags.DEFINE_integer("starts", optimize_lib.DEFAULT_STARTS, "Random starts per family.",
                               lower_bound=1)
_DP_SEEDS = flags.DEFINE_boolean(
    "dp_seeds", True, "Start the discrete phase from the cut DP's candidates too "
    "(--nodp_seeds: the rounded relaxed solutions only).")
_STEPS = flags.DEFINE_integer("steps", 100, "Relaxed optimisation steps.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.", lower_bound=0)
_TOP_K = flags.DEFINE_integer("top_k", 5, "Plans to print.", lower_bound=1)
_CACHE = flags.DEFINE_string(
    "compilation_cache_dir", None,
    "Persistent JAX compilation cache (later runs of the same job shape skip compilation); "
    "default $RLCOST_JAX_CACHE or ~/.cache/rlcost/jax, 'off' switches it off.")
_FRAMEWORK = flags.DEFINE_enum(
    "framework", "any", list(fw_lib.NAMES),
    "Search only plans this framework can run (any: the framework-neutral rules; "
    "--from_<framework>: that framework).")
_MAX_STALENESS = flags.DEFINE_integer(
    "max_staleness", 0, "Largest staleness allowed (0: on-policy, synchronous).", lower_bound=0)
_PARTIAL = flags.DEFINE_boolean(
    "partial_rollout", False, "Allow partial rollouts (needs --max_staleness >= 1).")
_RELAXED = flags.DEFINE_enum(
    "relaxed", "auto", list(optimize_lib.RELAXED),
    f"The relaxed (gradient) phase; auto: on when a family's space holds at least "
    f"{optimize_lib.RELAX_MIN_PLANS:.0e} value vectors or with --nodp_seeds (smaller spaces: "
    "the discrete phases alone found the same plans).")
_CHECK = flags.DEFINE_bool(
    "check", False, "Check every flag and the job, name the families the search takes and "
    "those it skips (and why), and stop before the search.")
_EXAMPLE = flags.DEFINE_enum(
    "example", None, list(cm.examples.names()),
    "A built-in example job (costmodel.examples): its model, batch, lengths, turns and "
    "NVL72 cluster replace --model and the job flags; --gpu picks the accelerator (GB200, "
    "GB300), --nodes the node count; its staleness is the least --max_staleness.")
_SPECULATIVE = flags.DEFINE_string(
    "speculative", None, "A draft the rollout engines may run, KIND:TOKENS:ACCEPTANCE"
    "[:DRAFT_MODEL] (KIND mtp, eagle, draft, ngram; e.g. mtp:3:0.7): each plan keeps it only "
    "where it shortens the step; frameworks nemo_rl, slime (and any).")
_ROLLOUT_PRECISION = flags.DEFINE_list(
    "rollout_precision", ["bf16"], "Rollout engine formats allowed (bf16, fp8: FP8 weights and "
    "KV cache, on GPUs with an FP8 peak); FP8 changes the sampling numerics, so it is opt-in.")


def _families(framework: str, job: cm.RLJob, mode: dict) -> tuple[str, ...] | None:
  """``--families``, each checked against the placements and the framework's space."""
  if _FAMILIES.value is None:
    return None
  allowed = fw_lib.families_for(job, framework, **mode)
  for f in _FAMILIES.value:
    if f not in search.FAMILIES:
      raise ValueError(f"--families: {f!r} is not one of {', '.join(search.FAMILIES)}")
    if f not in allowed and cm.placement(f).applies_to(job):
      raise ValueError(f"--families: {f!r} is outside the space of --framework={framework} "
                       f"with --max_staleness={mode['max_staleness']}"
                       f"{' --partial_rollout' if mode['partial_rollout'] else ''} "
                       f"(allowed: {', '.join(allowed)})")
  return tuple(_FAMILIES.value)


def _new_job() -> cm.RLJob:
  """The job the flags state (each error names its flag)."""
  with cli.flag("config_json" if cli.CONFIG_JSON.value else "model"):
    actor = (cm.ModelSpec.from_hf_config(cli.CONFIG_JSON.value) if cli.CONFIG_JSON.value
             else cm.models.get(cli.MODEL.value))
  reward = None
  if cli.REWARD_MODEL.value:
    with cli.flag("reward_model"):
      reward = cli.spec(cli.REWARD_MODEL.value)
  if cli.RESPONSE_MEAN.value > _RESPONSE_MAX.value:
    raise ValueError(f"--response_mean: {cli.RESPONSE_MEAN.value:g} exceeds --response_max="
                     f"{_RESPONSE_MAX.value}")
  with cli.flag("response_mean"):
    response = cm.ResponseLength.from_mean_max(cli.RESPONSE_MEAN.value,
                                               float(_RESPONSE_MAX.value))
  options = cli.job_options(_ALGORITHM.value)
  with cli.flag("mini_batches"):  # the one RLJob check left: mini-batches <= samples
    return cm.RLJob(_ALGORITHM.value, actor, prompts_per_step=float(_PROMPTS.value),
                    samples_per_prompt=float(_SAMPLES.value),
                    prompt_len=float(cli.PROMPT_LEN.value), response=response,
                    reward_model=reward, **options)


def _checked_inputs():
  """Every flag and combination, checked before any work: ``(start, current, job,
  cluster, framework, mode, families)``."""
  cli.check_outputs(cli.OUT.value)
  if _PARTIAL.value and _MAX_STALENESS.value < 1:
    raise ValueError("--partial_rollout: needs --max_staleness >= 1")
  for p in _ROLLOUT_PRECISION.value:
    if p not in space_lib.ROLLOUT_PRECISIONS:
      raise ValueError(f"--rollout_precision: {p!r} is not one of "
                       f"{', '.join(space_lib.ROLLOUT_PRECISIONS)}")
  start = cli.source()
  framework = _FRAMEWORK.value
  if start is not None:
    current = cli.import_run(*start)
    job, cluster = beyond_flags.apply_job_flags(current.job), current.cluster
    if not flags.FLAGS["framework"].present:  # plans the imported run's framework runs
      framework = start[0]
  elif _EXAMPLE.value:
    current = None
    job = cm.examples.job(_EXAMPLE.value)
    with cli.flag("gpu"):
      cluster = cm.examples.cluster(_EXAMPLE.value, cli.GPU.value,
                                    nodes=_NODES.value if flags.FLAGS["nodes"].present else None)
  else:
    current = None
    job = beyond_flags.apply_job_flags(_new_job())
    with cli.flag("gpu"):
      accelerator = cm.hardware.get(cli.GPU.value)
    cluster = cm.Cluster(accelerator, gpus_per_node=cli.GPUS_PER_NODE.value,
                         nodes=_NODES.value)
  staleness = _MAX_STALENESS.value
  if _EXAMPLE.value and start is None:
    staleness = max(staleness, cm.examples.staleness(_EXAMPLE.value))
  mode = dict(max_staleness=staleness, partial_rollout=_PARTIAL.value)
  return start, current, job, cluster, framework, mode, _families(framework, job, mode)


def _refuse(cluster: cm.Cluster, skipped: dict[str, str]) -> None:
  cli.fail(f"no plan on {cluster.nodes} x {cluster.gpus_per_node} "
           f"{cluster.accelerator.name}: " + "; ".join(skipped.values()))


def _skips(job: cm.RLJob, cluster: cm.Cluster, framework: str, mode: dict, families
           ) -> tuple[tuple[str, ...], dict[str, str]]:
  """The families to search and those :func:`search.optimize` skips, with why
  (:meth:`Framework.why_empty`); refuses the job when it would skip them all."""
  fw = fw_lib.get(framework)
  fams = families or fw_lib.families_for(job, framework, **mode)
  skipped = {f: fw.why_empty(f, job, cluster) for f in fams}
  skipped = {f: why for f, why in skipped.items() if why is not None}
  if len(skipped) == len(fams):
    _refuse(cluster, skipped)
  return tuple(f for f in fams if f not in skipped), skipped


def main(argv) -> int:
  del argv  # refused by the flag parser when not empty
  start, current, job, cluster, framework, mode, families = _checked_inputs()
  speculative = None
  if _SPECULATIVE.value:
    with cli.flag("speculative"):
      speculative = speculative_option.parse(_SPECULATIVE.value, job)
      speculative_option.check(framework, job, speculative)
  if start is None and beyond_flags.wants_cost_run():
    return beyond_flags.run_cost(job, cli.GPUS_PER_NODE.value)
  searched, skipped = _skips(job, cluster, framework, mode, families)
  print(report.format_job(job, cluster), flush=True)
  if current is not None and cli.not_modelled(current):
    print(cli.not_modelled(current))
  if _CHECK.value:
    print(f"families to search ({framework}): {', '.join(searched)}")
    print("\n".join(f"skipped {why}" for why in skipped.values()))
    return 0
  result = search.optimize(job, cluster, families=families, starts=_STARTS.value,
                           steps=_STEPS.value, seed=_SEED.value, top_k=_TOP_K.value,
                           progress=True, framework=framework,
                           compilation_cache=_CACHE.value,
                           rollout_precision=tuple(_ROLLOUT_PRECISION.value),
                           dp_seeds=_DP_SEEDS.value, relaxed=_RELAXED.value,
                           speculative=speculative, **mode)
  if not result.feasible and not result.best_by_family_s:  # every family was skipped
    _refuse(cluster, result.skipped)
  rules = (search.rules_of_thumb(job, cluster, framework=framework, **mode)
           if result.feasible else ())
  print(report.format_result(result, rules), flush=True)
  if start is not None:
    step = float(cm.estimate(job, current.plan, cluster).step_time_s)
    print(framework_settings.format_better(start[0], current.plan, step, result, job, cluster,
                                           run_settings=getattr(current, "settings", None)))
  if not result.feasible:
    cli.fail_with(1, f"no layout fits: {result.infeasible_reason}")
  written = []
  if cli.OUT.value:
    export.write_plan(cli.OUT.value, result.best_plan, result.best_estimate, result.family,
                      job=job, cluster=cluster)
    print(f"wrote {cli.OUT.value}")
    if cli.exports_requested():
      written = cli.write_exports(cli.OUT.value, result.best_plan, job, cluster)
      print("\n".join(written))
  if cli.report_path():
    html_report.write(cli.report_path(), job, cluster, result.best_plan, result.best_estimate,
                      rules, title=f"rlcost plan ({result.family})")
    print(f"wrote {cli.report_path()}")
  print("\n" + report.format_next(result.accepted_by, cli.OUT.value, cli.report_path(), written))
  return 0


# The job and cluster of a plain ``rlcost-plan``.
DEFAULTS = dict(model="qwen2.5-7b", gpu="H100", gpus_per_node=8, prompt_len=1024,
                response_mean=2000.0)


def call(argv: list[str]) -> int:
  """``rlcost-plan`` with ``argv`` in this process; its exit status."""
  return cli.call(main, "rlcost-plan", DEFAULTS, argv)


def run():
  """Console entry point (``rlcost-plan``)."""
  cli.run(main, "rlcost-plan", __doc__, DEFAULTS)


if __name__ == "__main__":
  run()
