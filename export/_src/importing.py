"""What every import shares: the facts a config lacks, typed reads of its keys,
the job and cluster built from them, and the plan compared as its settings.

A framework's config names the layout, the batch and the lengths' bounds,
but not everything the cost model needs: the mean response length, the
architecture when only a model path is given, the accelerator. Those come
from :class:`Given` (the keyword arguments of :func:`export.read_config`);
a fact that is needed and neither in the config nor given raises ValueError
naming the key and the keyword that supplies it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
from typing import Any
from typing import NamedTuple

import yaml

import costmodel as cm
from export._src import planfile


class _Run(NamedTuple):
  job: cm.RLJob
  plan: cm.Plan
  cluster: cm.Cluster


class Imported(_Run):
  """A framework config read as the cost model's job, plan and cluster.

  ``not_modelled`` lists the settings the config states that were read but
  that the cost model does not represent (``key=value``), so that nothing
  the config says is dropped unseen.
  """

  not_modelled: tuple[str, ...] = ()


def imported(job: cm.RLJob, plan: cm.Plan, cluster: cm.Cluster, settings: Tracked,
             relevant: str, notes: tuple[str, ...] = ()) -> Imported:
  """The import, with the settings matching the regex ``relevant`` (those a cost could
  depend on) that no rule read, and ``notes``, as its ``not_modelled``."""
  out = Imported(job, plan, cluster)
  off = [k[:-len("enabled")] for k in settings.keys()
         if k.endswith(".enabled") and settings.raw(k) in (False, "False", "false")]
  unread = [f"{k}={settings.raw(k)!r}" for k in settings.unread()
            if re.search(relevant, k) and not any(k.startswith(p) for p in off)
            and settings.raw(k) not in _OFF]
  try:  # a part of the checkpoint the model's architecture leaves out (a vision encoder)
    parts = cm.models.hf_not_modelled(job.actor.name)
  except ValueError:  # a name no table entry matches: a preset or a config.json's own
    parts = ()
  out.not_modelled = tuple(notes) + tuple(f"model: {p}" for p in parts) + tuple(unread)
  out.settings = dict(settings)  # as the run states them (what stays when a plan changes)
  return out


# Values that switch nothing on: a key set to one of them states no setting to model.
_OFF = (None, False, 0, "", "False", "false", "None", "null")


class Tracked(dict):
  """Settings that remember which keys a rule looked at."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.seen: set = set()

  def __getitem__(self, k):
    self.seen.add(k)
    return super().__getitem__(k)

  def get(self, k, default=None):
    self.seen.add(k)
    return super().get(k, default)

  def __contains__(self, k):
    self.seen.add(k)
    return super().__contains__(k)

  def raw(self, k):
    return super().get(k)

  def unread(self) -> list[str]:
    return [k for k in self.keys() if k not in self.seen]


@dataclasses.dataclass(frozen=True)
class Given:
  """Facts a framework config does not hold, given by the user.

  Attributes:
    model: The actor's architecture: a preset name, a path to a Hugging Face
      ``config.json`` (or its folder), or a :class:`ModelSpec`. None reads
      the config's model path when it names a preset.
    critic: The critic's architecture (PPO; default: the actor's).
    reward_model: The reward model's architecture, when the config enables one.
    response_mean: Mean response tokens (required: no config states it).
    gpu: Accelerator preset (default H100).
    gpus_per_node: GPUs per node of the cluster (default: the most GPUs per
      node any group of the config uses).
    oversample: DAPO's generated / kept samples (default: NeMo-RL's
      ``grpo.batch_multiplier``, slime's ``--over-sampling-batch-size`` over
      ``--rollout-batch-size``, else 1; an AReaL DAPO run states none and
      needs it).
    engine_max_seqs: vLLM's ``max_num_seqs`` where the framework has no key
      for it (default 256).
    prompt_len: Prompt tokens, where a config bounds prompt and response only
      together (NeMo-RL's ``max_new_tokens == max_total_sequence_length``;
      default: that importer's documented assumption, listed as not modelled).
    speculative_acceptance: The acceptance rate of a draft the config turns on
      (NeMo-RL, slime): no framework setting states it; None assumes
      ``speculative_keys.DEFAULT_ACCEPTANCE`` (0.7, vLLM #29334) and says so.
  """

  model: Any = None
  critic: Any = None
  reward_model: Any = None
  response_mean: float | None = None
  gpu: str = "H100"
  gpus_per_node: int | None = None
  oversample: float = 1.0
  engine_max_seqs: int = 256
  prompt_len: int | None = None
  speculative_acceptance: float | None = None


# Prompt tokens assumed where a config bounds prompt and response only together or not at
# all: RLJob's own default prompt length (costmodel RLJob.prompt_len); ``prompt_len=`` sets it.
PROMPT_ASSUMED = 1024


def unstated_prompt(g: Given, why: str, notes: list, cap: int | None = None) -> int:
  """The prompt length a config does not state: ``g.prompt_len``, else
  :data:`PROMPT_ASSUMED` (at most ``cap``), noted in ``notes`` as not modelled."""
  if g.prompt_len:
    return int(g.prompt_len)
  p = min(PROMPT_ASSUMED, cap) if cap else PROMPT_ASSUMED
  notes.append(f"prompt length: {why}; {p} tokens assumed (prompt_len=)")
  return p


def given(framework: str, missing: dict[str, Any]) -> Given:
  names = {f.name for f in dataclasses.fields(Given)}
  unknown = sorted(set(missing) - names)
  if unknown:
    raise ValueError(f"read_config({framework!r}): unknown keyword(s) {unknown}; the facts a "
                     f"config lacks are {sorted(names)}")
  return Given(**missing)


_SUFFIX = r"-(instruct|chat|base|fp8|int4|int8|awq|gptq|bf16|\d{4})$"


def _known_model(name: str) -> cm.ModelSpec | None:
  """The preset called ``name``, the model of a ``config.json`` at path ``name``, or None."""
  return (cm.models.get(name) if name in cm.models.names() else
          cm.ModelSpec.from_hf_config(name) if os.path.exists(name) else None)


# A model path that is an instruction, not a path: words with blanks, /path/to/..., <...>.
_INSTRUCTION = r"\s|^/path/to/|<[^>]*>"


def model_spec(value: Any, field: str, config_path: str | None = None) -> cm.ModelSpec:
  """A preset name, a ``config.json`` path or a ModelSpec; else the config's model path."""
  if isinstance(value, cm.ModelSpec):
    return value
  presets = ", ".join(cm.models.names())
  if value is not None and not (isinstance(value, str) and value):
    raise ValueError(f"{field}={value!r} must be a preset name, a config.json path or a ModelSpec")
  if value is not None:
    spec = _known_model(value)
    if spec is None:
      raise ValueError(f"{field}={value!r} is neither a preset ({presets}) nor an existing "
                       "config.json")
    return spec
  if config_path and re.search(_INSTRUCTION, str(config_path)):
    raise ValueError(f"{field}: the config's model path {config_path!r} is an instruction, "
                     f"not a path; give {field}= a preset or a config.json "
                     "(--model, --config_json)")
  if config_path:
    base = os.path.basename(str(config_path).rstrip("/")).lower()
    # a checkpoint's name less its tuning and quantization suffixes: the same architecture
    while re.search(_SUFFIX, base):
      base = re.sub(_SUFFIX, "", base)
    if base in cm.models.names():
      return cm.models.get(base)
    try:  # a Hugging Face id, a fine-tune or a checkpoint folder named after one
      return cm.models.from_hf_id(str(config_path))
    except ValueError as e:
      raise ValueError(f"{field}: the config's model path {config_path!r} names no preset and "
                       f"no known architecture ({str(e).splitlines()[0]}); give {field}= a "
                       "preset or a config.json (--model, --config_json)") from None
  raise ValueError(f"{field}: the config names no model path; give {field}= a preset "
                   f"({presets}) or a config.json (--model, --config_json)")


# ----- reading a source -------------------------------------------------------------------


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
  """Nested dicts as ``{dotted key: value}``."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def read_text(source: Any, framework: str) -> tuple[str, str]:
  """``(path, text)`` of the file ``source`` names, or ValueError naming it."""
  path = os.fspath(source)
  if not os.path.isfile(path):
    raise ValueError(f"{framework}: source={path!r} is not a file")
  with open(path, encoding="utf-8") as f:
    return path, f.read()


def read_yaml(source: Any, framework: str) -> dict[str, Any]:
  """A nested dict, or a YAML file of one, flattened to dotted keys."""
  if isinstance(source, dict):
    return flatten(source)
  path, text = read_text(source, framework)
  try:
    d = yaml.safe_load(text)
  except yaml.YAMLError as e:
    raise ValueError(f"{framework}: source={path!r} is not YAML: {e}") from None
  if not isinstance(d, dict):
    raise ValueError(f"{framework}: source={path!r} is not a YAML mapping")
  return flatten(d)


def parse_argv(words: list[str], switches: frozenset[str] = frozenset()) -> dict[str, Any]:
  """``--name value`` and ``--name=value`` pairs as ``{name: value}``; a switch (one of
  ``switches``, or a flag followed by another flag or nothing) maps to True."""
  out: dict[str, Any] = {}
  i = 0
  while i < len(words):
    w = words[i]
    i += 1
    if not w.startswith("--"):
      continue
    if "=" in w:
      k, v = w.split("=", 1)
      out[k[2:]] = v
    elif w in switches or i == len(words) or words[i].startswith("--"):
      out[w[2:]] = True
    else:
      out[w[2:]] = words[i]
      i += 1
  return out


def command_words(text: str, *markers: str) -> list[str]:
  """The words of the first command line of ``text`` (a script with ``\\`` continuations)
  that contains one of ``markers``, else of the whole text."""
  text = re.sub(r"\\\n", " ", text)
  lines = [s for s in text.splitlines() if any(m in s for m in markers)] or [text]
  return shlex.split(lines[0], comments=True)


def number(settings: dict, key: str, framework: str, default: Any = None, kind: type = int,
           minimum: float | None = 1) -> Any:
  """``settings[key]`` as ``kind`` (``default`` when absent), or ValueError naming both."""
  if key not in settings or settings[key] is None:
    if default is None:
      raise ValueError(f"{framework}: {key} is not set and has no default the cost model can use")
    return default
  v = settings[key]
  if isinstance(v, str) and "$" in v:
    raise ValueError(f"{framework}: {key}={v!r} is set from a variable the script does not "
                     "assign (an environment variable); set it in the script")
  try:
    if isinstance(v, bool):
      raise TypeError
    x = float(v)
    if kind is int:
      if not x.is_integer():
        raise TypeError
      x = int(x)
  except (TypeError, ValueError):
    what = "an integer" if kind is int else "a number"
    raise ValueError(f"{framework}: {key}={v!r} must be {what}") from None
  if minimum is not None and x < minimum:
    raise ValueError(f"{framework}: {key}={v!r} must be >= {minimum}")
  return x


def flag(settings: dict, key: str, framework: str, default: bool = False) -> bool:
  """``settings[key]`` as a bool (``True``/``False``, any case), or ValueError naming it."""
  v = settings.get(key, default)
  if isinstance(v, bool):
    return v
  if isinstance(v, str) and v.lower() in ("true", "false"):
    return v.lower() == "true"
  raise ValueError(f"{framework}: {key}={v!r} must be True or False")


def choice(settings: dict, key: str, framework: str, table: dict, default: Any = None) -> Any:
  """``table[settings[key]]``, or ValueError naming the key, its value and the choices."""
  v = settings.get(key, default)
  if v not in table:
    raise ValueError(f"{framework}: {key}={v!r} is not one of {sorted(table, key=str)}")
  return table[v]


def estimator(settings: dict, key: str, framework: str, exact: dict, alike: dict,
              default: str, notes: list) -> str:
  """The cost model's algorithm of the framework's advantage estimator ``settings[key]``:
  ``exact[v]``, or ``alike[v]`` (an estimator with the same stages: a critic-free advantage
  from the rewards of a prompt's samples), which goes in ``notes``."""
  v = settings.get(key, default)
  if v in alike:
    notes.append(f"{key}={v}: costed as {alike[v]} (the same stages; its advantage "
                 "arithmetic is not modelled)")
    return alike[v]
  return choice(settings, key, framework, exact, default)


def build_job(framework: str, g: Given, algorithm: str, actor: cm.ModelSpec, prompts: int,
              n: int, prompt_len: int, max_response: int, mini_batches: int, ppo_epochs: int,
              use_reference: bool, reward: bool, lora: cm.LoRA | None = None,
              reward_path: str | None = None) -> cm.RLJob:
  """The RL job, the response mean and the reward model taken from ``g``."""
  if g.response_mean is None:
    raise ValueError(f"{framework}: response_mean is not in any config (the mean response length "
                     f"under max_response={max_response}); pass response_mean=<tokens> "
                     "(--response_mean)")
  mean = float(g.response_mean)
  if not 1 <= mean <= max_response:
    raise ValueError(f"{framework}: response_mean={g.response_mean!r} must lie in "
                     f"[1, max_response={max_response}]")
  rm = None
  if reward:
    if g.reward_model is None and not reward_path:
      raise ValueError(f"{framework}: the config enables a reward model; pass reward_model=<preset "
                       "or config.json> (--reward_model): its architecture is not in the config")
    rm = model_spec(g.reward_model, "reward_model", reward_path)
  critic = None
  if algorithm == "ppo":
    critic = model_spec(g.critic, "critic") if g.critic is not None else actor
  return cm.RLJob(algorithm, actor, prompts_per_step=float(prompts), samples_per_prompt=float(n),
                  prompt_len=float(prompt_len),
                  response=cm.ResponseLength.from_mean_max(mean, float(max_response)),
                  critic=critic, reward_model=rm, use_reference=use_reference,
                  ppo_epochs=ppo_epochs, mini_batches=mini_batches, lora=lora,
                  oversample=float(g.oversample) if algorithm == "dapo" else 1.0)


def build_cluster(g: Given, groups: list[tuple[int, int]], extra_gpus: int = 0) -> cm.Cluster:
  """The smallest cluster of ``g.gpus_per_node``-GPU nodes (default: the most per node of the
  ``(nnodes, per_node)`` groups) holding the groups and ``extra_gpus`` more."""
  per_node = g.gpus_per_node or max(p for _, p in groups)
  total = sum(nn * p for nn, p in groups) + extra_gpus
  return cm.Cluster(cm.hardware.get(g.gpu), gpus_per_node=int(per_node),
                    nodes=max(1, math.ceil(total / per_node)))


def plan_settings(plan: cm.Plan, unexpressed: dict[str, tuple[str, ...]] = None) -> dict:
  """A plan as plain settings: pools by name, each role's pool and its training and inference
  layouts (the inference layout as the role runs it), the engine and the mode.

  Two plans with equal settings run the same way; ``unexpressed`` drops fields
  (``{"reward.infer": ("micro_batch",)}``) that a framework's config cannot state.
  """
  d = planfile.plan_to_dict(plan)
  unexpressed = dict(unexpressed or {})
  roles = {}
  for name, r in d["roles"].items():
    roles[name] = {"pool": r["pool"], "train": r["train"], "infer": r["infer"] or r["train"]}
    for phase in ("train", "infer"):
      drop = unexpressed.get(f"{name}.{phase}", ())
      if roles[name][phase] is not None:
        roles[name][phase] = {k: v for k, v in roles[name][phase].items() if k not in drop}
  drop = unexpressed.get("engine", ())
  return {"pools": d["pools"], "pool_fields": d["pool_fields"], "rollout_pool": d["rollout_pool"],
          "roles": roles, "engine": {k: v for k, v in d["engine"].items() if k not in drop},
          "mode": d["mode"]}
