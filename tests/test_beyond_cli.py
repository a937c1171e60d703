"""Command-line flags for LoRA, multi-turn episodes, sizing and mixed GPU types:
bad values print one line naming the flag and exit with status 2, before any work."""

from __future__ import annotations

import os

import pytest

import search.plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRICES = os.path.join(ROOT, "examples", "prices.yaml")


@pytest.mark.parametrize("args, head", [
    (["--lora_rank", "0.5"], "--lora_rank: '0.5' is not a whole number"),
    (["--lora_rank", "8", "--lora_targets", "qkv"], "--lora_targets: LoRA: targets=('qkv',)"),
    (["--turns", "0"], "--turns: 0 is not a positive integer"),
    (["--turns", "3", "--tool_latency_s_mean", "5", "--tool_latency_s_max", "1"],
     "--turns: MultiTurn: tool_latency_s_max=1.0 must be >= tool_latency_s_mean=5.0"),
    (["--size_nodes", "1"], "--prices: needed with --size_nodes or --mixed"),
    (["--prices", PRICES, "--mixed", "H800:x"], "--mixed: 'H800:x' must read GPU:nodes"),
    (["--prices", PRICES, "--mixed", "V100X:1"], "--mixed: unknown hardware name='V100X'"),
    (["--prices", PRICES, "--size_nodes", "0"], "--size_nodes: '0' must be a whole node count"),
    (["--prices", PRICES, "--size_nodes", "2", "--sizing_search", "relaxed",
      "--sizing_starts", "0"], "--sizing_starts: 0 is not a positive integer"),
    (["--prices", PRICES, "--size_nodes", "2", "--sizing_search", "relaxed",
      "--target_step_s", "-5"], "--target_step_s: -5 must be > 0"),
    (["--prices", PRICES, "--mixed", "H800:1,B200:1", "--sizing_search", "relaxed"],
     "--mixed: B200 has no price"),
    (["--prices", "nope.yaml", "--size_nodes", "1"],
     "--prices: No such file or directory: 'nope.yaml'"),
])
def test_bad_flags_exit_2_with_one_line(args, head, capsys):
  assert search.plan.call(args) == 2
  out, err = capsys.readouterr()
  assert err.splitlines() == [err.strip()] and err.startswith(f"rlcost-plan: {head}"), err
  assert out == "" and "Traceback" not in err
