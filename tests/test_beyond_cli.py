"""Command-line flags for LoRA, multi-turn episodes, sizing and mixed types:
bad values print one line naming the flag and exit with status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("args, needle", [
    (["--lora_rank", "0.5"], "rank=0.5"),
    (["--lora_rank", "8", "--lora_targets", "qkv"], "targets"),
    (["--turns", "0"], "turns=0"),
    (["--turns", "3", "--tool_latency_s_mean", "5", "--tool_latency_s_max", "1"],
     "tool_latency_s_max"),
    (["--size_nodes", "1"], "--prices"),
    (["--prices", "examples/prices.yaml", "--mixed", "H800:x"], "--mixed"),
    (["--prices", "examples/prices.yaml", "--size_nodes", "0"], "--size_nodes"),
    (["--prices", "examples/prices.yaml", "--size_nodes", "2", "--sizing_search", "relaxed",
      "--sizing_starts", "0"], "starts=0"),
    (["--prices", "examples/prices.yaml", "--size_nodes", "2", "--sizing_search", "relaxed",
      "--target_step_s", "-5"], "target_step_s=-5.0"),
    (["--prices", "examples/prices.yaml", "--mixed", "H800:1,B200:1", "--sizing_search",
      "relaxed"], "B200"),
])
def test_bad_flags_exit_2_with_one_line(args, needle):
  p = subprocess.run([sys.executable, "-m", "search.plan", *args], capture_output=True,
                     text=True, timeout=300, check=False)
  assert p.returncode == 2, p.stderr[-2000:]
  errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and needle in errors[0], p.stderr[-2000:]
  assert "Traceback" not in p.stderr
