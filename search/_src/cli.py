"""What the command lines share: flags for a run to start from, the job's PPO
settings, exports and the report; checks made before any work; one-line errors.

``rlcost-plan`` and ``rlcost-estimate`` both define ``--model``,
``--config_json``, ``--reward_model``, ``--gpu``, ``--gpus_per_node`` and
``--response_mean``; :func:`given` reads them by name for an import, taking
only the ones the user set.
"""

from __future__ import annotations

import logging as py_logging
import os
import sys
from typing import Any

# jax warns on stderr when it finds no GPU; a planner on a laptop expects that.
py_logging.getLogger("jax._src.xla_bridge").setLevel(py_logging.ERROR)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

import costmodel as cm  # noqa: E402
import export  # noqa: E402
from search._src.framework_settings import exports  # noqa: E402

FROM = {fw: flags.DEFINE_string(f"from_{fw}", None, help)
        for fw, help in (("verl", "veRL run to start from: overrides (key=value per line), a "
                          "launch script (.sh) or a YAML config."),
                         ("openrlhf", "OpenRLHF run to start from: a file holding the "
                          "train_ppo_ray command line."),
                         ("nemo_rl", "NeMo-RL run to start from: its YAML config."),
                         ("slime", "slime run to start from: a file holding the train.py / "
                          "train_async.py command line."),
                         ("areal", "AReaL run to start from: its YAML experiment config."))}
_OVERSAMPLE = flags.DEFINE_float(
    "oversample", None, "DAPO's generated / kept samples of an imported run (AReaL's config "
    "does not state it; NeMo-RL's and slime's do).")
_CRITIC = flags.DEFINE_string("critic_model", None,
                              "Critic preset or config.json (PPO; default: the actor's).")
_PPO_EPOCHS = flags.DEFINE_integer("ppo_epochs", None, "Passes over each batch (default 1, or "
                                   "the imported run's).")
_MINI_BATCHES = flags.DEFINE_integer("mini_batches", None, "Optimizer steps per epoch (default "
                                     "1, or the imported run's).")
_EXPORT = flags.DEFINE_list(
    "export", [], f"Frameworks to export to ({', '.join(export.FRAMEWORKS)}): writes "
    "<plan file stem>.<framework>.sh|yaml next to the plan file.")
_REPORT = flags.DEFINE_string("report", None, "Write a self-contained HTML report here.")


def fail(message: str) -> None:
  """The one line a bad input gets on stderr, and exit status 2."""
  prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "rlcost"
  print(f"{prog}: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(f"bad flag: {e}")
  return []  # not reached


def run(main) -> None:
  """``app.run(main)``, with flag errors and ValueError as one line and exit status 2."""
  def guarded(argv):
    try:
      return main(argv)
    except (ValueError, OSError) as e:  # bad input, or a file that cannot be read or written
      fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
  try:
    app.run(guarded, flags_parser=_parse_flags)
  except SystemExit as e:
    _exit(e.code)


def _exit(code) -> None:
  """Ends the process with ``code`` once its output is flushed, without the
  interpreter's teardown: freeing the compiled programs and traced graphs one
  object at a time takes about 0.3 s after a search, and nothing is left to
  write by then (files are closed as they are written)."""
  if code is not None and not isinstance(code, int):
    print(code, file=sys.stderr)
    code = 1
  py_logging.shutdown()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code or 0)


# ----- checks before any work -------------------------------------------------------------


def check_out_path(flag: str, path: str | None) -> None:
  """``path``'s folder must exist and be writable (checked before a search)."""
  if path is None:
    return
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    what = "is not a folder" if os.path.exists(folder) else "does not exist"
    raise ValueError(f"--{flag}={path!r}: folder {folder!r} {what}")
  if not os.access(folder, os.W_OK):
    raise ValueError(f"--{flag}={path!r}: folder {folder!r} is not writable")
  if os.path.isdir(path):
    raise ValueError(f"--{flag}={path!r} is a folder; give a file name")


def check_outputs(out: str | None) -> None:
  """``--out``, ``--report`` and ``--export`` (which needs a plan file to write next to)."""
  check_out_path("out", out)
  check_out_path("report", _REPORT.value)
  for name in _EXPORT.value:
    if name not in export.FRAMEWORKS:
      raise ValueError(f"--export={name!r} is not one of {export.FRAMEWORKS}")
  if _EXPORT.value and out is None:
    raise ValueError(f"--export={','.join(_EXPORT.value)} writes next to the plan file; give "
                     "--out")
  for name, v in (("ppo_epochs", _PPO_EPOCHS.value), ("mini_batches", _MINI_BATCHES.value)):
    if v is not None and v < 1:
      raise ValueError(f"--{name}={v} must be >= 1")


def job_options(algorithm: str) -> dict[str, Any]:
  """RLJob keywords from ``--critic_model``, ``--ppo_epochs`` and ``--mini_batches``."""
  out: dict[str, Any] = {}
  if _CRITIC.value is not None:
    if algorithm != "ppo":
      raise ValueError(f"--critic_model={_CRITIC.value!r}: algorithm={algorithm!r} has no critic")
    out["critic"] = _spec(_CRITIC.value, "critic_model")
  if _PPO_EPOCHS.value is not None:
    out["ppo_epochs"] = _PPO_EPOCHS.value
  if _MINI_BATCHES.value is not None:
    out["mini_batches"] = _MINI_BATCHES.value
  return out


def _spec(value: str, flag: str) -> cm.ModelSpec:
  if value in cm.models.names():
    return cm.models.get(value)
  if os.path.exists(value):
    return cm.ModelSpec.from_hf_config(value)
  raise ValueError(f"--{flag}={value!r} is neither a preset ({', '.join(cm.models.names())}) nor "
                   "an existing config.json")


# ----- a run to start from ------------------------------------------------------------------


def source() -> tuple[str, str] | None:
  """``(framework, path)`` of the one ``--from_*`` flag given, or None."""
  given_ = [(fw, f.value) for fw, f in FROM.items() if f.value is not None]
  if len(given_) > 1:
    raise ValueError(f"--from_{given_[0][0]} and --from_{given_[1][0]}: start from one run")
  if given_ and not os.path.isfile(given_[0][1]):
    raise ValueError(f"--from_{given_[0][0]}={given_[0][1]!r} is not a file")
  return given_[0] if given_ else None


def given() -> dict[str, Any]:
  """The facts the user set on the command line, as :func:`export.read_config` keywords."""
  f = flags.FLAGS
  out: dict[str, Any] = {}
  if f["config_json"].value:
    out["model"] = f["config_json"].value
  elif f["model"].present:
    out["model"] = f["model"].value
  for name, key in (("response_mean", "response_mean"), ("reward_model", "reward_model"),
                    ("gpu", "gpu"), ("gpus_per_node", "gpus_per_node"),
                    ("critic_model", "critic"), ("oversample", "oversample")):
    if f[name].present and f[name].value is not None:
      out[key] = f[name].value
  return out


def import_run(framework: str, path: str) -> export.Imported:
  """The imported run, with ``--ppo_epochs`` / ``--mini_batches`` applied to its job."""
  imported = export.read_config(framework, path, **given())
  job = imported.job
  changes = {k: v for k, v in job_options(job.algorithm).items() if k != "critic"}
  if changes:
    job = job.replace(**changes)
    cm.validate_plan(imported.plan, job, imported.cluster)
  return export.Imported(job, imported.plan, imported.cluster)


# ----- exports ----------------------------------------------------------------------------


def write_exports(out: str, plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster) -> list[str]:
  """Writes each ``--export`` next to the plan file ``out``; a refusal is an error."""
  stem = os.path.splitext(out)[0]
  lines = []
  for fw, (text, reason) in exports(plan, job, cluster, _EXPORT.value).items():
    if text is None:
      raise ValueError(f"--export={fw}: {reason}")
    path = f"{stem}.{fw}.{'sh' if export.get(fw).kind == 'command' else 'yaml'}"
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
    lines.append(f"wrote {path}")
  return lines


def report_path() -> str | None:
  return _REPORT.value


def exports_requested() -> bool:
  return bool(_EXPORT.value)
