"""Command-line flags for LoRA, multi-turn episodes, cluster sizing and mixed GPU types.

Defined here and applied by ``search.plan``:

  python -m search.plan --lora_rank 32 --lora_targets q,k,v,o
  python -m search.plan --turns 4 --tool_latency_s_mean 2 --tool_latency_s_max 10 \
      --overlap_tools
  python -m search.plan --prices examples/prices.yaml --size_nodes 1,2,4 \
      --target_step_s 120 --pareto_plot pareto.png
  python -m search.plan --prices examples/prices.yaml --mixed H800:1,H20:2
  python -m search.plan --prices examples/prices.yaml --size_nodes 4 --sizing_search relaxed \
      --target_step_s 120

Bad values print one line naming the flag and exit with status 2.
"""

from __future__ import annotations

from absl import flags

import costmodel as cm
from search._src import cli
from search._src import mixed as mixed_lib
from search._src import sizing
from search._src import sizing_search

_LORA_RANK = flags.DEFINE_integer("lora_rank", 0, "LoRA rank of the actor (0: full fine-tuning).",
                                  lower_bound=0)
_LORA_TARGETS = flags.DEFINE_list("lora_targets", list(cm.LoRA().targets),
                                  "LoRA target layers (q, k, v, o, gate, up, down).")
_LORA_SYNC = flags.DEFINE_enum("lora_sync", "adapters", ["adapters", "merged"],
                               "What the weight sync of a LoRA actor moves.")
_TURNS = flags.DEFINE_integer("turns", 1, "Model turns per episode (> 1: agentic episodes).",
                              lower_bound=1)
_TOOL_MEAN = flags.DEFINE_float("tool_latency_s_mean", 1.0, "Mean tool-call latency, s.")
_TOOL_MAX = flags.DEFINE_float("tool_latency_s_max", 5.0, "Slowest tool call of a round, s.")
_ENV_CPU = flags.DEFINE_float("env_cpu_s", 0.1, "CPU seconds per tool call.")
_ENV_CORES = flags.DEFINE_integer("env_cores", 0, "Environment CPU cores (0: the cluster's).",
                                  lower_bound=0)
_OBS = flags.DEFINE_integer("observation_tokens", 256, "Tokens a tool call returns.",
                            lower_bound=0)
_NO_KV_REUSE = flags.DEFINE_bool("no_kv_reuse", False, "Prefill the whole context every turn.")
_OVERLAP = flags.DEFINE_bool("overlap_tools", False,
                             "Asynchronous episodes: decode others while one waits on a tool.")
_PRICES = flags.DEFINE_string("prices", None, "YAML file of prices per GPU-hour "
                              "(see examples/prices.yaml, an example).")
_SIZE_NODES = flags.DEFINE_list("size_nodes", None,
                                "Size the cluster: node counts to try per priced GPU type.")
_PLANNER = flags.DEFINE_enum("planner", "layouts", ["layouts", "optimize", "rules"],
                             "Planner per sized cluster (layouts: exact ladder, no search).")
_TARGET_STEP = flags.DEFINE_float("target_step_s", None, "Longest acceptable step time, s.")
_TARGET_RATE = flags.DEFINE_float("target_samples_per_s", None, "Lowest acceptable samples/s.")
_BUDGET = flags.DEFINE_float("budget_per_hour", None, "Highest acceptable cluster price per hour.")
_PLOT = flags.DEFINE_string("pareto_plot", None, "Write the Pareto front plot to this path.")
_MIXED = flags.DEFINE_list("mixed", None, "Mixed GPU types: GPU:nodes,GPU:nodes (with --prices).")
_SIZING_SEARCH = flags.DEFINE_enum(
    "sizing_search", "enumerate", ["enumerate", "relaxed"],
    "How --size_nodes / --mixed search: enumerate every type and node count, or relax pool "
    "sizes and types (up to the largest --size_nodes per type) and round to whole nodes.")
_TYPE_PER_POOL = flags.DEFINE_bool(
    "size_type_per_pool", False, "With --sizing_search relaxed and --size_nodes: each pool "
    "picks its GPU type (a mixed cluster) instead of one type for the cluster.")
_RELAXED_STARTS = flags.DEFINE_integer("sizing_starts", 8, "Relaxed sizing: starts per family.",
                                       lower_bound=1)
_RELAXED_STEPS = flags.DEFINE_integer("sizing_steps", 120, "Relaxed sizing: optimisation steps.",
                                      lower_bound=1)


def apply_job_flags(job: cm.RLJob) -> cm.RLJob:
  """The job with the LoRA and multi-turn flags applied (a bad value is a
  ValueError naming the flag)."""
  changes = {}
  if _LORA_RANK.value:
    with cli.flag("lora_targets"):
      changes["lora"] = cm.LoRA(float(_LORA_RANK.value), targets=tuple(_LORA_TARGETS.value),
                                sync=_LORA_SYNC.value)
  if _TURNS.value != 1:
    with cli.flag("turns"):
      changes["multi_turn"] = cm.MultiTurn(
          turns=_TURNS.value, tool_latency_s_mean=_TOOL_MEAN.value,
          tool_latency_s_max=_TOOL_MAX.value, env_cpu_s=_ENV_CPU.value,
          observation_tokens=float(_OBS.value), env_cores=_ENV_CORES.value,
          kv_reuse=not _NO_KV_REUSE.value, overlap_tools=_OVERLAP.value)
  return job.replace(**changes) if changes else job


def wants_cost_run() -> bool:
  """Whether the flags ask for sizing or a mixed-type assignment."""
  return bool(_SIZE_NODES.value or _MIXED.value)


def _groups(items) -> dict:
  out = {}
  for item in items:
    gpu, _, n = item.partition(":")
    if not n.isdigit() or int(n) < 1:
      raise ValueError(f"--mixed: {item!r} must read GPU:nodes with nodes >= 1")
    with cli.flag("mixed"):
      cm.hardware.get(gpu)
    out[gpu] = int(n)
  return out


def _nodes() -> list[int]:
  nodes = []
  for n in _SIZE_NODES.value:
    if not n.isdigit() or int(n) < 1:
      raise ValueError(f"--size_nodes: {n!r} must be a whole node count >= 1")
    nodes.append(int(n))
  return nodes


def run_cost(job: cm.RLJob, gpus_per_node: int) -> int:
  """Sizes the cluster or assigns mixed types; prints the result; exit status."""
  if not _PRICES.value:
    raise ValueError("--prices: needed with --size_nodes or --mixed")
  for name, v in (("target_step_s", _TARGET_STEP.value),
                  ("target_samples_per_s", _TARGET_RATE.value),
                  ("budget_per_hour", _BUDGET.value)):
    if v is not None and not v > 0:
      raise ValueError(f"--{name}: {v:g} must be > 0")
  with cli.flag("prices"):
    prices = sizing.load_prices(_PRICES.value)
  for gpu in _groups(_MIXED.value or []):
    if prices.get(gpu) is None:
      raise ValueError(f"--mixed: {gpu} has no price in --prices={_PRICES.value}")
  if _SIZING_SEARCH.value == "relaxed":
    return _run_relaxed(job, prices, gpus_per_node)
  if _MIXED.value:
    groups = _groups(_MIXED.value)
    result = mixed_lib.mixed_cluster(job, groups, {g: prices.get(g) for g in groups},
                                     gpus_per_node)
    print(result.table())
    return 0 if result.best is not None else 1
  nodes = _nodes()
  planner = mixed_lib.layouts_planner if _PLANNER.value == "layouts" else _PLANNER.value
  res = sizing.size_cluster(job, prices, tuple(nodes), gpus_per_node,
                            target_step_s=_TARGET_STEP.value,
                            target_samples_per_s=_TARGET_RATE.value,
                            budget_per_hour=_BUDGET.value, planner=planner)
  print(res.table())
  for tag, o in (("cheapest meeting the target", res.cheapest),
                 ("fastest within the budget", res.fastest)):
    print(f"{tag}: " + (f"{o.nodes} x {o.gpus // o.nodes} {o.gpu}, step {o.step_time_s:.1f} s, "
                        f"{o.cost_per_step:.3f} per step" if o else "none"))
  if _PLOT.value:
    sizing.plot_pareto(res.options, _PLOT.value)
    print(f"wrote {_PLOT.value}")
  return 0 if res.cheapest is not None else 1


def _run_relaxed(job: cm.RLJob, prices: dict, gpus_per_node: int) -> int:
  """``--sizing_search relaxed``: the cheapest option meeting the target and, with
  ``--budget_per_hour``, the fastest within it; prints both and the options scored."""
  kw = dict(gpus_per_node=gpus_per_node, starts=_RELAXED_STARTS.value,
            steps=_RELAXED_STEPS.value)
  if _MIXED.value:
    groups = _groups(_MIXED.value)
    kw.update(groups=groups, share_type=False, prices={g: prices.get(g) for g in groups})
  else:
    kw.update(nodes=max(_nodes()), share_type=not _TYPE_PER_POOL.value, prices=prices)
  runs = [("cheapest meeting the target", sizing_search.relaxed_sizing(
      job, goal="cheapest", target_step_s=_TARGET_STEP.value,
      target_samples_per_s=_TARGET_RATE.value, **kw))]
  if _BUDGET.value is not None:
    runs.append(("fastest within the budget", sizing_search.relaxed_sizing(
        job, goal="fastest", budget_per_hour=_BUDGET.value, **kw)))
  scored = {(o.gen_gpu, o.gen_nodes, o.train_gpu, o.train_nodes): o for _, r in runs
            for o in r.options}
  options = [sizing_search.as_cluster_option(o, job) for o in scored.values()]
  print(sizing.format_options(options, sizing.pareto(options)))
  for tag, r in runs:
    o = r.best
    where = "none" if o is None else (
        f"all on {o.gen_nodes} x {o.gen_gpu}" if o.colocated else
        f"gen {o.gen_nodes} x {o.gen_gpu}, train {o.train_nodes} x {o.train_gpu}")
    tail = "" if o is None else (f", step {o.step_time_s:.1f} s, {o.cost_per_step:.3f} per "
                                 f"step, mode {o.plan.mode.name}")
    print(f"{tag} (relaxed, {r.assignments} assignments scored, {r.wall_time_s:.0f} s): "
          f"{where}{tail}")
  if _PLOT.value:
    sizing.plot_pareto(options, _PLOT.value)
    print(f"wrote {_PLOT.value}")
  return 0 if runs[0][1].best is not None else 1
