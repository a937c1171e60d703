"""The ``rlcost-plan`` command line (run as ``python -m search.plan``)."""

import json
import os
import re
import subprocess
import sys


def _start(args, tmp_path):
  env = dict(os.environ)
  # The code of this checkout, not an installed copy (the command runs in tmp_path).
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
  return subprocess.Popen([sys.executable, "-m", "search.plan", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def test_cli_plans_prints_tables_and_writes_json(tmp_path):
  out_path = tmp_path / "plan.json"
  ok = _start(["--model", "qwen2.5-1.5b", "--nodes", "2", "--prompts", "128",
               "--prompt_len", "512", "--response_mean", "1000", "--response_max", "4096",
               "--families", "split", "--starts", "8", "--steps", "30",
               "--out", str(out_path)], tmp_path)
  bad = _start(["--model", "llama-3.1-405b", "--nodes", "1", "--families", "colocated",
                "--starts", "4", "--steps", "10", "--prompts", "64"], tmp_path)
  out, err = ok.communicate(timeout=900)
  assert ok.returncode == 0, err[-3000:]
  assert err == ""  # no log lines without --verbose
  # The output ends in how to run the plan: the exports and the report it lacks.
  assert re.search(r"\nto run the best plan:\n  add --export [a-z_,]+ to write each "
                   r"framework's command or config next to it\n  add --report plan.html .*\n$",
                   out), out[-600:]
  assert "cluster: 2 x 8 H100 (16 GPUs)" in out
  assert re.search(r"^#1 +[0-9.]+ s +split ", out, re.M)
  assert "rules of thumb:" in out
  rows = {}
  # On-policy by default: the asynchronous areal rule is left out.
  assert not re.search(r"^areal ", out, re.M)
  for name in ("verl", "openrlhf", "kv_fit"):
    m = re.search(rf"^{name} +\w+ +([0-9.]+) +([0-9.]+)x", out, re.M)
    assert m, f"rule {name} missing from:\n{out}"
    rows[name] = (float(m.group(1)), float(m.group(2)))
  plan = json.loads(out_path.read_text())
  best = plan["predicted"]["step_time_s"]
  assert plan["family"] == "split" and set(plan["pools"]) == {"gen", "train"}
  assert sum(plan["pools"].values()) <= 16
  assert plan["roles"]["actor"]["pool"] == "train"
  assert plan["mode"]["staleness"] == 0
  assert re.search(rf"^best plan \(split\), accepted by [a-z_, ]+:\nstep {best:.2f} s", out,
                   re.M)
  # The speed-up column is the rule's step time over the searched plan's.
  for step, speed in rows.values():
    assert abs(step / best - speed) < 0.01 + 1e-3 * speed
  out, err = bad.communicate(timeout=900)
  assert bad.returncode == 1
  assert "INFEASIBLE" in out and len(err.splitlines()) == 1 and err.startswith("rlcost-plan: ")
  assert re.search(r"no layout fits: .*stage '\w+' on pool 'all' needs [0-9.]+ GiB per GPU.*"
                   r"short by [0-9.]+ GiB", err), err[-2000:]
