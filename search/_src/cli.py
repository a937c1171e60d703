"""What the command lines share: flags for a run to start from, the job's PPO
settings, exports and the report; checks made before any work; one-line errors.

``rlcost-plan`` and ``rlcost-estimate`` both define ``--model``,
``--config_json``, ``--reward_model``, ``--gpu``, ``--gpus_per_node`` and
``--response_mean``; :func:`given` reads them by name for an import, taking
only the ones the user set.
"""

from __future__ import annotations

import contextlib
import logging as py_logging
import os
import re
import signal
import sys
from typing import Any

# jax warns on stderr when it finds no GPU; a planner on a laptop expects that.
py_logging.getLogger("jax._src.xla_bridge").setLevel(py_logging.ERROR)

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

import costmodel as cm  # noqa: E402
import export  # noqa: E402
from search._src import cli_help  # noqa: E402
from search._src.framework_settings import export_options  # noqa: E402

# Flags both commands take; each command sets its own defaults (:func:`run`).
MODEL = flags.DEFINE_string("model", None, "The actor: a preset (costmodel.models.names()) or a "
                            "Hugging Face id; for an imported run, where its model path names "
                            "none.")
CONFIG_JSON = flags.DEFINE_string("config_json", None,
                                  "Hugging Face config.json of the actor (overrides --model).")
REWARD_MODEL = flags.DEFINE_string("reward_model", None, "Reward-model preset or config.json "
                                   "(default: a rule-based reward on CPU).")
GPU = flags.DEFINE_string("gpu", None, "Accelerator preset (costmodel.hardware.names()).")
GPUS_PER_NODE = flags.DEFINE_integer("gpus_per_node", None, "GPUs per node.", lower_bound=1)
PROMPT_LEN = flags.DEFINE_integer("prompt_len", None, "Prompt tokens (mean); for an imported "
                                  "run, instead of its longest prompt.", lower_bound=1)
RESPONSE_MEAN = flags.DEFINE_float("response_mean", None, "Mean response tokens (an imported "
                                   "run does not state it).", lower_bound=1)

OUT = flags.DEFINE_string("out", None, "Write the plan (rlcost-plan: the best), its job and "
                          "estimate as JSON to this path.")

FROM = {name: flags.DEFINE_string(f"from_{name}", None, r.from_help)
        for name, r in export.RECORDS.items()}
_OVERSAMPLE = flags.DEFINE_float(
    "oversample", None, "DAPO's generated / kept samples of an imported run (AReaL's config "
    "does not state it; NeMo-RL's and slime's do).")
_SPEC_ACCEPTANCE = flags.DEFINE_float(
    "speculative_acceptance", None, "Acceptance rate of the draft an imported NeMo-RL or slime "
    "run turns on (no framework setting states it; default 0.7, an EAGLE measurement "
    "from vLLM #29334).")
_CRITIC = flags.DEFINE_string("critic_model", None,
                              "Critic preset or config.json (PPO; default: the actor's).")
_PPO_EPOCHS = flags.DEFINE_integer("ppo_epochs", None, "Passes over each batch (default 1, or "
                                   "the imported run's).", lower_bound=1)
_MINI_BATCHES = flags.DEFINE_integer("mini_batches", None, "Optimizer steps per epoch (default "
                                     "1, or the imported run's).", lower_bound=1)
_EXPORT = flags.DEFINE_list(
    "export", [], f"Frameworks to export to ({', '.join(export.FRAMEWORKS)}): writes "
    "<plan file stem>.<framework>.sh|yaml next to the plan file.")
_REPORT = flags.DEFINE_string("report", None, "Write a self-contained HTML report here.")


_VERBOSE = flags.DEFINE_bool("verbose", False, "Log lines (absl INFO) on stderr: each family's "
                             "search, compilation; -v for short.")

_PROG = ["rlcost"]


def fail(message: str) -> None:
  """The one line a bad input gets on stderr (``rlcost-plan: --flag: why``), and
  exit status 2."""
  print(f"{_PROG[0]}: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def fail_with(code: int, message: str) -> None:
  """One line on stderr and exit status ``code`` (1: the job does not fit)."""
  print(f"{_PROG[0]}: {message}", file=sys.stderr, flush=True)
  sys.exit(code)


@contextlib.contextmanager
def flag(name: str):
  """Re-raises a ValueError of the block as one naming ``--name`` (the flag
  whose value the block reads)."""
  try:
    yield
  except ValueError as e:
    raise ValueError(f"--{name}: {_first_line(e)}") from None
  except OSError as e:  # a file the flag names that cannot be read
    raise ValueError(f"--{name}: {e.strerror or e}: {e.filename!r}") from None


def _first_line(e: BaseException) -> str:
  return str(e).splitlines()[0] if str(e) else type(e).__name__


def _flag_error(e: flags.Error) -> str:
  """absl's parse error as ``--name: why``."""
  text = _first_line(e)
  m = re.match(r"flag --([\w-]+)=(.*?): (.*)", text)
  if m:
    name, value, why = m.groups()
    if why.startswith("invalid literal for int()"):
      why = f"{value!r} is not a whole number"
    elif why.startswith("could not convert string to float"):
      why = f"{value!r} is not a number"
    elif value not in why:
      why += f" (got {value!r})"
    return f"--{name}: {why}"
  m = re.match(r"Unknown command line flag '([^']+)'(?:\. Did you mean: ([\w, ]+?) ?\?)?", text)
  if m:
    maybe = [f"--{x.strip()}" for x in (m.group(2) or "").split(",") if x.strip()]
    return (f"--{m.group(1)}: no such flag" +
            (f" (did you mean {' or '.join(maybe)}?)" if maybe else "") + "; see --help")
  return text


def _parse_flags(argv: list[str]) -> list[str]:
  # -v alone is --verbose (absl's -v takes a level).
  argv = [a if a != "-v" else "--verbose" for a in argv]
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    fail(_flag_error(e))
  if len(rest) > 1:
    fail(f"unexpected argument(s) {' '.join(rest[1:])!r}: every input is a --flag (see --help)")
  logging.set_verbosity(logging.INFO if _VERBOSE.value else logging.WARNING)
  return rest


def _guarded(main):
  def guarded(argv):
    try:
      return main(argv)
    except (ValueError, OSError) as e:  # bad input, or a file that cannot be read or written
      fail(_first_line(e))
  return guarded


def call(main, prog: str, defaults: dict[str, Any], argv: list[str]) -> int:
  """Runs the command in this process (tests): flags reset to ``defaults``, parsed
  from ``argv`` (without the program name) and ``main`` run; its exit status."""
  _PROG[0] = prog
  flags.FLAGS.unparse_flags()
  for name, value in defaults.items():
    flags.FLAGS.set_default(name, value)
  try:
    return _guarded(main)(_parse_flags([prog, *argv])) or 0
  except SystemExit as e:
    return e.code if isinstance(e.code, int) else 1


def run(main, prog: str, doc: str, defaults: dict[str, Any]) -> None:
  """``app.run(main)`` for the command ``prog`` with its flag ``defaults``:
  ``--help`` prints ``doc`` and the project's flags by group
  (:mod:`search._src.cli_help`) and exits 0; flag errors and ValueError print one
  line and exit 2."""
  _PROG[0] = prog
  # A reader that closes the pipe early (``rlcost-plan --help | head``) ends the
  # command quietly, as it ends ``cat``, instead of a BrokenPipeError traceback.
  if hasattr(signal, "SIGPIPE"):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
  for name, value in defaults.items():
    flags.FLAGS.set_default(name, value)
  if any(a in ("-h", "--help", "-help", "-?") for a in sys.argv[1:]):
    print(cli_help.usage(doc))
    _exit(0)
  if "--helpfull" in sys.argv[1:]:
    print(flags.FLAGS.get_help())
    _exit(0)
  try:
    app.run(_guarded(main), flags_parser=_parse_flags)
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
    raise ValueError(f"--{flag}: the folder of {path!r} {what}")
  if not os.access(folder, os.W_OK):
    raise ValueError(f"--{flag}: the folder of {path!r} is not writable")
  if os.path.isdir(path):
    raise ValueError(f"--{flag}: {path!r} is a folder; give a file name")


def check_outputs(out: str | None) -> None:
  """``--out``, ``--report`` and ``--export`` (which needs a plan file to write next to)."""
  check_out_path("out", out)
  check_out_path("report", _REPORT.value)
  for name in _EXPORT.value:
    if name not in export.FRAMEWORKS:
      raise ValueError(f"--export: {name!r} is not one of {', '.join(export.FRAMEWORKS)}")
  if _EXPORT.value and out is None:
    raise ValueError("--export: writes next to the plan file; give --out too")


def job_options(algorithm: str) -> dict[str, Any]:
  """RLJob keywords from ``--critic_model``, ``--ppo_epochs`` and ``--mini_batches``."""
  out: dict[str, Any] = {}
  if _CRITIC.value is not None:
    if algorithm != "ppo":
      raise ValueError(f"--critic_model: algorithm {algorithm!r} has no critic")
    with flag("critic_model"):
      out["critic"] = spec(_CRITIC.value)
  if _PPO_EPOCHS.value is not None:
    out["ppo_epochs"] = _PPO_EPOCHS.value
  if _MINI_BATCHES.value is not None:
    out["mini_batches"] = _MINI_BATCHES.value
  return out


def spec(value: str) -> cm.ModelSpec:
  """A preset, a Hugging Face id (:func:`costmodel.models.get`) or a config.json path."""
  if os.path.isfile(value):
    return cm.ModelSpec.from_hf_config(value)
  return cm.models.get(value)


# ----- a run to start from ------------------------------------------------------------------


def source() -> tuple[str, str] | None:
  """``(framework, path)`` of the one ``--from_*`` flag given, or None."""
  given_ = [(fw, f.value) for fw, f in FROM.items() if f.value is not None]
  if len(given_) > 1:
    raise ValueError(f"--from_{given_[1][0]}: start from one run (--from_{given_[0][0]} is "
                     "given too)")
  if given_ and not os.path.isfile(given_[0][1]):
    raise ValueError(f"--from_{given_[0][0]}: {given_[0][1]!r} is not a file")
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
                    ("critic_model", "critic"), ("oversample", "oversample"),
                    ("prompt_len", "prompt_len"),
                    ("speculative_acceptance", "speculative_acceptance")):
    if f[name].present and f[name].value is not None:
      out[key] = f[name].value
  return out


def import_run(framework: str, path: str) -> export.Imported:
  """The imported run, with ``--ppo_epochs`` / ``--mini_batches`` applied to its job."""
  with flag(f"from_{framework}"):
    imported = export.read_config(framework, path, **given())
  job = imported.job
  changes = {k: v for k, v in job_options(job.algorithm).items() if k != "critic"}
  if PROMPT_LEN.present:
    changes["prompt_len"] = float(PROMPT_LEN.value)
  if changes:
    job = job.replace(**changes)
    cm.validate_plan(job, imported.plan, imported.cluster)
  out = export.Imported(job, imported.plan, imported.cluster)
  out.not_modelled = tuple(getattr(imported, "not_modelled", ()))
  out.settings = dict(getattr(imported, "settings", {}))
  return out


def not_modelled(imported: export.Imported) -> str:
  """The one line of what the run states that the cost model reads but does not
  represent (empty when nothing)."""
  items = getattr(imported, "not_modelled", ())
  return f"not modelled: {'; '.join(items)}" if items else ""


# ----- exports ----------------------------------------------------------------------------


def write_exports(out: str, plan: cm.Plan, job: cm.RLJob, cluster: cm.Cluster) -> list[str]:
  """Writes each ``--export`` that accepts the plan next to the plan file ``out``;
  one line per file written, per setting the framework adapts (why) and per framework that
  refuses the plan (why); a plan it adapts has its estimate as that framework runs it."""
  stem = os.path.splitext(out)[0]
  lines = []
  for fw in _EXPORT.value:
    opts = export_options(fw, plan)
    try:
      adapted, changes = export.adapt(fw, job, plan, cluster, **opts)
      text = export.get(fw).export(adapted, job, cluster, **opts)
    except ValueError as err:
      lines.append(f"not exported to {fw}: {err}")
      continue
    path = f"{stem}.{fw}.{'sh' if export.get(fw).kind == 'command' else 'yaml'}"
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
    lines.append(f"wrote {path}")
    lines += [f"  {fw} adapts {c}" for c in changes]
    if changes:
      t = float(cm.estimate(job, adapted, cluster).step_time_s)
      lines.append(f"  as {fw} runs it: {t:.4g} s/step")
  return lines


def report_path() -> str | None:
  return _REPORT.value


def exports_requested() -> bool:
  return bool(_EXPORT.value)
