"""``--help`` of the command lines: the project's flags grouped by purpose,
each with its default, after the command's description and worked examples.
absl's own flags (logging, debugger) are listed by ``--helpfull`` only."""

from __future__ import annotations

import textwrap

from absl import flags

import export

# Flags by purpose, in the order a user meets them; a project flag in no group
# is listed under "Other" (so none is ever hidden).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Start from a run you have",
     ("plan", *(f"from_{name}" for name in export.FRAMEWORKS))),
    ("Job", ("model", "config_json", "algorithm", "prompts", "samples", "prompt_len",
             "response_mean", "response_max", "reward_model", "critic_model", "ppo_epochs",
             "mini_batches", "oversample")),
    ("Cluster", ("gpu", "nodes", "gpus_per_node")),
    ("Search", ("framework", "families", "max_staleness", "partial_rollout",
                "rollout_precision", "starts", "steps", "seed", "relaxed", "dp_seeds",
                "compilation_cache_dir")),
    ("Output", ("top_k", "out", "export", "report", "check", "verbose")),
    ("LoRA", ("lora_rank", "lora_targets", "lora_sync")),
    ("Multi-turn episodes", ("turns", "tool_latency_s_mean", "tool_latency_s_max", "env_cpu_s",
                             "env_cores", "observation_tokens", "no_kv_reuse",
                             "overlap_tools")),
    ("Cluster sizing and mixed GPU types",
     ("prices", "size_nodes", "planner", "target_step_s", "target_samples_per_s",
      "budget_per_hour", "pareto_plot", "mixed", "sizing_search", "size_type_per_pool",
      "sizing_starts", "sizing_steps")),
)

_WIDTH = 100
_NAME_COLUMN = 34


def project_flags() -> dict[str, flags.Flag]:
  """The flags the project defines (not absl's own), by name."""
  out = {}
  for module, defined in flags.FLAGS.flags_by_module_dict().items():
    if module.startswith("absl."):
      continue
    for f in defined:
      out[f.name] = f
  return out


def default_text(f: flags.Flag) -> str:
  """A flag's default as a user types it: ``512`` (not ``512.0``), ``a,b``,
  ``true``; empty when there is none."""
  v = f.default
  if v is None or v == [] or v == "":
    return ""
  if isinstance(v, bool):
    return "true" if v else "false"
  if isinstance(v, float):
    return f"{v:g}"
  if isinstance(v, (list, tuple)):
    return ",".join(str(x) for x in v)
  return str(v)


def _entry(f: flags.Flag) -> list[str]:
  name = f"--{'[no]' if f.boolean else ''}{f.name}"
  default = default_text(f)
  if default and not f.boolean:
    name += f"={default}"
  elif f.boolean and f.default:
    name += " (on)"
  text = " ".join((f.help or "").split())
  if isinstance(f, flags.EnumFlag) or getattr(f.parser, "enum_values", None):
    values = getattr(f.parser, "enum_values", ())
    if values and not all(v in text for v in values):
      text += f" One of {', '.join(values)}."
  head = f"  {name}"
  body = textwrap.wrap(text, _WIDTH - _NAME_COLUMN) or [""]
  if len(head) >= _NAME_COLUMN - 1:
    return [head] + [" " * _NAME_COLUMN + line for line in body]
  return [head.ljust(_NAME_COLUMN) + body[0]] + [" " * _NAME_COLUMN + line for line in body[1:]]


def usage(doc: str) -> str:
  """The command's description and examples (``doc``), then its flags by group."""
  defined = project_flags()
  lines = [textwrap.dedent(doc).strip(), ""]
  listed = set()
  for title, names in GROUPS + (("Other", tuple(sorted(defined))),):
    here = [defined[n] for n in names if n in defined and n not in listed]
    if not here:
      continue
    lines.append(f"{title}:")
    for f in here:
      lines += _entry(f)
      listed.add(f.name)
    lines.append("")
  lines.append("absl's own flags (logging, debugger): --helpfull.")
  return "\n".join(lines)
