"""``--help`` of both commands: exit status 0, the project's flags by purpose with
their defaults as a user types them, worked examples; absl's own flags only under
``--helpfull``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _help(module: str, flag: str = "--help") -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, "-m", module, flag], capture_output=True, text=True,
                        env=env, timeout=300, check=False)


@pytest.fixture(scope="module")
def plan_help() -> str:
  r = _help("search.plan")
  assert r.returncode == 0 and r.stderr == "", r.stderr
  return r.stdout


def test_plan_help_groups_the_flags_with_integer_defaults(plan_help):
  for title in ("Start from a run you have:", "Job:", "Cluster:", "Search:", "Output:", "LoRA:",
                "Multi-turn episodes:", "Cluster sizing and mixed GPU types:"):
    assert re.search(rf"^{re.escape(title)}$", plan_help, re.M), title
  for default in ("--prompts=512 ", "--samples=8 ", "--prompt_len=1024 ", "--nodes=8 ",
                  "--response_mean=2000 ", "--response_max=8192 ", "--model=qwen2.5-7b ",
                  "--framework=any ", "--lora_rank=0 "):
    assert re.search(rf"^  {re.escape(default)}", plan_help, re.M), default
  assert ".0 " not in plan_help and "'512.0'" not in plan_help
  examples = re.findall(r"^  rlcost-plan --\w+", plan_help, re.M)
  assert len(examples) >= 3
  # absl's own flags only under --helpfull.
  for absl_flag in ("--verbosity", "--logtostderr", "--pdb", "--only_check_args"):
    assert absl_flag not in plan_help
  assert "--helpfull" in plan_help


def test_estimate_help_names_what_an_imported_run_needs():
  r = _help("search.estimate_cli")
  assert r.returncode == 0 and r.stderr == "", r.stderr
  for flag in ("--plan", "--from_verl", "--response_mean", "--prompt_len", "--model", "--gpu",
               "--export", "--report"):
    assert re.search(rf"^  {flag}\b", r.stdout, re.M), flag
  assert re.search(r"^  rlcost-estimate --from_verl ", r.stdout, re.M)
  assert "--nodes" not in r.stdout  # rlcost-plan's flags are not rlcost-estimate's


def test_helpfull_lists_absl_flags_too():
  r = _help("search.plan", "--helpfull")
  assert r.returncode == 0 and "--verbosity" in r.stdout and "--prompts" in r.stdout


def test_help_into_a_pipe_closed_early_ends_without_a_traceback():
  # ``rlcost-estimate --help | head -3``: the reader closes the pipe before the help ends.
  env = dict(os.environ, PYTHONPATH=ROOT)
  cmd = f"{sys.executable} -m search.estimate_cli --help | head -3"
  r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=300,
                     check=False)
  assert len(r.stdout.splitlines()) == 3
  assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
