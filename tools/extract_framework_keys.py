"""Extracts the configuration keys and flags each framework accepts, at a pinned commit.

Run by hand against a git checkout (or bare clone) of each framework; it reads
files with ``git show COMMIT:path`` and never imports the framework, then writes
one small JSON file per framework to ``tests/data/framework_keys/`` named
``<framework>_<commit>.json``. The export tests check every emitted key, flag and
value type against these files.

  python tools/extract_framework_keys.py verl ~/src/verl 1dda039
  python tools/extract_framework_keys.py openrlhf ~/src/OpenRLHF v0.11.0
  python tools/extract_framework_keys.py nemo_rl ~/src/RL 7ea279a
  python tools/extract_framework_keys.py slime ~/src/slime 624b824
  python tools/extract_framework_keys.py areal ~/src/AReaL 4aef98d

What is read from each:

* veRL: the generated, fully expanded trainer configs
  ``verl/trainer/config/_generated_ppo_trainer.yaml`` and
  ``_generated_ppo_megatron_trainer.yaml``, and the experimental recipes'
  configs (``fully_async_policy`` and ``one_step_off_policy``), each a key ->
  type map, recipes with the base config they extend; the ``AdvantageEstimator``
  names of ``verl/trainer/ppo/core_algos.py``.
* OpenRLHF: every ``parser.add_argument`` of ``openrlhf/cli/train_ppo_ray.py``
  (name, type or action, choices).
* NeMo-RL: the example configs ``grpo_math_1B``, ``grpo_math_1B_megatron``,
  ``grpo_rm_1B``, ``ppo_math_1B``, ``ppo_math_1B_megatron`` (keys and the
  ``defaults:`` file each extends), the fields of the typed configs
  (``nemo_rl/models/policy/__init__.py``, ``.../generation/vllm/config.py``),
  the ``vllm_cfg`` keys the vLLM worker reads, and the keyword arguments it
  passes to vLLM itself (which ``vllm_kwargs`` must not repeat).
* slime: every flag of ``slime/utils/arguments.py``, the Megatron and SGLang
  pass-through flags its launch scripts (``scripts/*.sh``) use (and whether
  they are written with a value), and whether
  ``train.py`` / ``train_async.py`` exist.
* AReaL: the key tree of ``GRPOConfig`` in ``areal/api/cli_args.py`` (dataclass
  fields with their annotations) and the terminals of the allocation grammar in
  ``areal/api/alloc_mode.py`` (backends and parallel dimension letters).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys

import yaml

OUT_DIR = os.path.join(os.path.dirname(__file__), os.pardir, "tests", "data", "framework_keys")

REPOSITORIES = {"verl": "verl-project/verl", "openrlhf": "OpenRLHF/OpenRLHF",
                "nemo_rl": "NVIDIA-NeMo/RL", "slime": "THUDM/slime", "areal": "inclusionAI/AReaL"}


class Repo:
  """Files of one commit of a git repository."""

  def __init__(self, path: str, commit: str):
    worktree = os.path.isdir(os.path.join(path, ".git"))
    self.git = ["git", "-C", path] if worktree else ["git", f"--git-dir={path}"]
    self.commit = self._run("rev-parse", f"{commit}^{{commit}}").strip()

  def _run(self, *args: str) -> str:
    return subprocess.run([*self.git, *args], check=True, capture_output=True,
                          text=True).stdout

  def show(self, path: str) -> str:
    return self._run("show", f"{self.commit}:{path}")

  def ls(self, folder: str) -> list[str]:
    return self._run("ls-tree", "-r", "--name-only", self.commit, folder).split()


# ----- YAML configs -------------------------------------------------------------


def _kind(v) -> str:
  if v is None:
    return "null"
  if isinstance(v, bool):
    return "bool"
  if isinstance(v, int):
    return "int"
  if isinstance(v, float):
    return "float"
  if isinstance(v, list):
    return "list"
  if isinstance(v, dict):
    return "dict"
  s = str(v)
  if s == "???":
    return "missing"
  if "${" in s:
    return "interpolation"
  return "str"


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
  """Dotted key -> kind of its default; an empty dict is an open node (``dict``)."""
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict) and v:
      out.update(flatten(v, key + "."))
    else:
      out[key] = _kind(v)
  return out


def _yaml(text: str) -> dict:
  return yaml.safe_load(text) or {}


def _defaults(d: dict) -> list[str]:
  """The configs a Hydra (veRL) or NeMo-RL config file extends."""
  base = d.pop("defaults", None)
  d.pop("hydra", None)
  if base is None:
    return []
  if isinstance(base, str):
    return [base.removesuffix(".yaml")]
  return [b.removesuffix(".yaml") for b in base if isinstance(b, str) and b != "_self_"]


def extract_verl(repo: Repo) -> dict:
  root = "verl/trainer/config"
  configs = {}
  for name in ("ppo_trainer", "ppo_megatron_trainer"):
    text = repo.show(f"{root}/_generated_{name}.yaml")
    configs[name] = {"defaults": [], "keys": flatten(_yaml(text))}
  for recipe in ("fully_async_policy", "one_step_off_policy"):
    folder = f"verl/experimental/{recipe}/config"
    for path in repo.ls(folder):
      if path.endswith(".yaml"):
        d = _yaml(repo.show(path))
        base = _defaults(d)
        configs[os.path.basename(path)[:-5]] = {"defaults": base, "keys": flatten(d)}
  estimators = _enum_members(repo.show("verl/trainer/ppo/core_algos.py"), "AdvantageEstimator")
  return {"configs": configs, "adv_estimators": estimators}


# ----- argparse flags -------------------------------------------------------------


def _const(node):
  try:
    return ast.literal_eval(node)
  except (ValueError, SyntaxError):
    return ast.unparse(node)


def argparse_flags(source: str) -> dict[str, dict]:
  """Every ``*.add_argument("--name", ...)`` (and ``reset_arg(parser, "--name", ...)``)."""
  flags = {}
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, ast.Call):
      continue
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
    if name not in ("add_argument", "reset_arg"):
      continue
    args = [a for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    names = [a.value for a in args if a.value.startswith("--")]
    if not names:
      continue
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    spec = {}
    if "action" in kw:
      spec["action"] = _const(kw["action"])
    if "type" in kw:
      spec["type"] = ast.unparse(kw["type"])
    if "choices" in kw:
      c = _const(kw["choices"])
      spec["choices"] = list(c) if isinstance(c, (list, tuple)) else c
    if "nargs" in kw:
      spec["nargs"] = _const(kw["nargs"])
    for n in names:
      flags[n] = spec
  return dict(sorted(flags.items()))


def extract_openrlhf(repo: Repo) -> dict:
  return {"entry_point": "openrlhf.cli.train_ppo_ray",
          "flags": argparse_flags(repo.show("openrlhf/cli/train_ppo_ray.py"))}


def extract_slime(repo: Repo) -> dict:
  flags = argparse_flags(repo.show("slime/utils/arguments.py"))
  # A pass-through flag takes a value when some script writes one after it.
  takes_value: dict[str, bool] = {}
  for path in repo.ls("scripts"):
    if path.endswith(".sh"):
      for m in re.finditer(r"(?<![\w-])(--[a-z][a-z0-9-]*)([ \t=]+[^\s\\-][^\s\\]*)?",
                           repo.show(path)):
        takes_value[m.group(1)] = takes_value.get(m.group(1), False) or bool(m.group(2))
  top = set(repo.ls("."))
  script_flags = {f: ("value" if v else "switch") for f, v in sorted(takes_value.items())
                  if f not in flags}
  # SGLang server flags slime passes through with the --sglang- prefix
  # (slime/backends/sglang_utils/arguments.py) that only its docs write, with the doc line.
  doc_flags: dict[str, dict[str, str]] = {}
  for path in repo.ls("docs/en"):
    if path.endswith(".md"):
      for i, line in enumerate(repo.show(path).splitlines(), 1):
        for m in re.finditer(r"(?<![\w-])(--sglang-[a-z0-9-]+)([ \t=]+[^\s\\-][^\s\\]*)?",
                             line):
          f, arity = m.group(1), "value" if m.group(2) else "switch"
          if f in flags or f in script_flags or doc_flags.get(f, {}).get("arity") == "value":
            continue
          if f not in doc_flags or arity == "value":  # the first line that gives a value
            doc_flags[f] = {"arity": arity, "source": f"{path}:{i}"}
  return {"flags": flags,
          "script_flags": script_flags,
          "doc_flags": dict(sorted(doc_flags.items())),
          "entry_points": sorted(p for p in ("train.py", "train_async.py") if p in top)}


# ----- typed configs (TypedDict / dataclass fields) --------------------------------


def class_fields(source: str) -> dict[str, dict[str, str]]:
  """Class name -> {field: annotation} for the classes of a module, bases included."""
  tree = ast.parse(source)
  own, bases = {}, {}
  for node in tree.body:
    if isinstance(node, ast.ClassDef):
      own[node.name] = {s.target.id: ast.unparse(s.annotation) for s in node.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
      bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]

  def full(name: str) -> dict[str, str]:
    out = {}
    for b in bases.get(name, []):
      if b in own:
        out.update(full(b))
    out.update(own[name])
    return out

  return {name: full(name) for name in own}


def extract_nemo_rl(repo: Repo) -> dict:
  configs = {}
  for name in ("grpo_math_1B", "grpo_math_1B_megatron", "grpo_rm_1B", "ppo_math_1B",
               "ppo_math_1B_megatron"):
    d = _yaml(repo.show(f"examples/configs/{name}.yaml"))
    base = _defaults(d)
    configs[name] = {"defaults": base, "keys": flatten(d)}
  typed = {}
  for path, names in (
      ("nemo_rl/models/policy/__init__.py",
       ("DTensorConfig", "MegatronConfig", "MegatronOptimizerConfig", "MegatronDDPConfig",
        "SequencePackingConfig", "PolicyConfig")),
      ("nemo_rl/models/generation/vllm/config.py", ("VllmSpecificArgs", "VllmConfig")),
      ("nemo_rl/algorithms/grpo.py", ("GRPOConfig", "AsyncGRPOConfig")),
      ("nemo_rl/algorithms/ppo.py", ("PPOConfig", "AsyncPPOConfig"))):
    fields = class_fields(repo.show(path))
    typed.update({k: dict(sorted(fields[k].items())) for k in names if k in fields})
  worker = repo.show("nemo_rl/models/generation/vllm/vllm_worker.py")
  read = set(re.findall(r"""vllm_cfg"?\]?\s*(?:\)\s*)?(?:\.get\(|\[)\s*["'](\w+)["']""", worker))
  reserved = set()
  for node in ast.walk(ast.parse(worker)):
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and getattr(node.targets[0], "id", None) == "llm_kwargs"
        and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "dict"):
      reserved.update(k.arg for k in node.value.keywords if k.arg)
  return {"configs": configs, "typed": typed, "vllm_cfg_read": sorted(read),
          "vllm_kwargs_reserved": sorted(reserved)}


def _dataclass_keys(fields: dict[str, dict[str, str]], root: str) -> dict[str, str]:
  """Dotted keys of a dataclass tree; a field whose type is another class recurses."""
  out = {}

  def walk(cls: str, prefix: str, seen: tuple[str, ...]) -> None:
    for name, ann in fields[cls].items():
      if name.startswith("_") and name != "_version":
        continue
      inner = [t for t in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", ann) if t in fields]
      if inner and not ann.startswith(("tuple", "list")) and inner[0] not in seen:
        walk(inner[0], f"{prefix}{name}.", (*seen, inner[0]))
      else:
        out[f"{prefix}{name}"] = ann
  walk(root, "", (root,))
  return out


def _enum_members(source: str, cls: str) -> list[str]:
  """Values of ``NAME = "value"`` members of an enum class."""
  for node in ast.parse(source).body:
    if isinstance(node, ast.ClassDef) and node.name == cls:
      return [s.value.value for s in node.body
              if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)]
  return []


def extract_areal(repo: Repo) -> dict:
  cli = repo.show("areal/api/cli_args.py")
  grammar = repo.show("areal/api/alloc_mode.py")
  terminals = {}
  for name in ("INFER_BACKEND", "TRAIN_BACKEND", "INF_DIM_TYPE", "DIM_TYPE"):
    m = re.search(rf"^\s*{name}:\s*(.+)$", grammar, re.M)
    terminals[name] = re.findall(r'"(\w+)"', m.group(1)) if m else []
  return {"config_keys": _dataclass_keys(class_fields(cli), "GRPOConfig"),
          "scheduling_strategy_types": _enum_members(cli, "SchedulingStrategyType"),
          "allocation_terminals": terminals}


EXTRACTORS = {"verl": extract_verl, "openrlhf": extract_openrlhf, "nemo_rl": extract_nemo_rl,
              "slime": extract_slime, "areal": extract_areal}


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("framework", choices=sorted(EXTRACTORS))
  p.add_argument("repo", help="a git checkout or bare clone of the framework")
  p.add_argument("commit", help="commit, tag or branch to read")
  p.add_argument("--out", default=OUT_DIR, help="output folder (tests/data/framework_keys)")
  a = p.parse_args(argv)
  repo = Repo(a.repo, a.commit)
  data = {"framework": a.framework, "repository": REPOSITORIES[a.framework],
          "ref": a.commit, "commit": repo.commit, **EXTRACTORS[a.framework](repo)}
  os.makedirs(a.out, exist_ok=True)
  path = os.path.join(a.out, f"{a.framework}_{repo.commit[:7]}.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, indent=1, sort_keys=False)
    f.write("\n")
  print(f"wrote {path} ({os.path.getsize(path):,} bytes)")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
