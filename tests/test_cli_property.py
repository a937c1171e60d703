"""Both command lines over random flag values, in this process: exit 0 with a
plan (``rlcost-plan --check``: the families its search takes), exit 1 when the
plan does not fit in memory (``rlcost-estimate``), or exit 2 with exactly one
line on stderr; never a traceback. And ``rlcost-plan`` on every cluster shape
of 1-64 nodes x 1-8 GPUs a node."""

from __future__ import annotations

import pathlib
import re

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

import costmodel as cm
import export
from search import estimate_cli
from search import plan as plan_cli
from search._src import frameworks as fw_lib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Values a user may type for a count that are not one.
_BAD_COUNT = st.sampled_from(["0", "-3", "1.5", "many", ""])


def _spoil(draw, argv: list[str], flags: tuple[str, ...]) -> list[str]:
  """``argv`` as drawn, or (one time in four) with one count flag's value made bad."""
  if draw(st.integers(0, 3)):
    return argv
  i = argv.index(draw(st.sampled_from(flags)))
  return argv[:i + 1] + [draw(_BAD_COUNT)] + argv[i + 2:]


def _outcome(command: str, code: int, out: str, err: str) -> None:
  """The promise of both commands, whatever the flags."""
  assert "Traceback" not in out + err
  if code == 0:
    assert err == "", err
    return
  lines = err.splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"rlcost-{command}: "), (code, err)
  assert code == 2 or (command == "estimate" and code == 1), (code, err)


@st.composite
def _plan_flags(draw) -> list[str]:
  response_max = draw(st.integers(64, 32768))
  argv = ["--check",
          "--nodes", str(draw(st.integers(1, 64))),
          "--gpus_per_node", str(draw(st.integers(1, 8))),
          "--model", draw(st.sampled_from(cm.models.names())),
          "--gpu", draw(st.sampled_from(cm.hardware.names())),
          "--algorithm", draw(st.sampled_from(cm.ALGORITHMS)),
          "--framework", draw(st.sampled_from(fw_lib.NAMES)),
          "--prompts", str(draw(st.integers(1, 2048))),
          "--samples", str(draw(st.integers(1, 16))),
          "--prompt_len", str(draw(st.integers(1, 8192))),
          "--response_mean", str(draw(st.integers(response_max // 16, response_max))),
          "--response_max", str(response_max),
          "--max_staleness", str(draw(st.integers(0, 3))),
          "--mini_batches", str(draw(st.integers(1, 4)))]
  if draw(st.booleans()):
    argv.append("--partial_rollout")
  return _spoil(draw, argv, ("--nodes", "--gpus_per_node", "--prompts", "--samples",
                             "--prompt_len", "--mini_batches"))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_plan_flags())
def test_plan_plans_or_refuses_in_one_line(capsys, argv):
  code = plan_cli.call(argv)
  out, err = capsys.readouterr()
  _outcome("plan", code, out, err)
  if code == 0:
    nodes, gpus = int(argv[argv.index("--nodes") + 1]), int(argv[argv.index("--gpus_per_node") + 1])
    n = nodes * gpus
    assert f"({n} GPU{'' if n == 1 else 's'})" in out
    assert re.search(r"^families to search \(\w+\): \w+", out, re.M), out


_MODEL_PATHS = ("Qwen/Qwen2.5-1.5B", "Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B")


def _verl_run(draw, response_max: int) -> list[str]:
  """A veRL run's overrides (a colocated GRPO/PPO job as its examples write it)."""
  n = draw(st.sampled_from([1, 2, 4, 5, 8]))
  mini = draw(st.sampled_from([8, 16, 32]))
  return [f"algorithm.adv_estimator={draw(st.sampled_from(['grpo', 'gae', 'rloo']))}",
          f"data.train_batch_size={mini * draw(st.integers(1, 4))}",
          f"data.max_prompt_length={draw(st.sampled_from([256, 1024, 4096]))}",
          f"data.max_response_length={response_max}",
          f"actor_rollout_ref.model.path={draw(st.sampled_from(_MODEL_PATHS))}",
          f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="
          f"{draw(st.sampled_from([1, 2, 4]))}",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
          "critic.ppo_micro_batch_size_per_gpu=4",
          "actor_rollout_ref.rollout.tensor_model_parallel_size="
          f"{draw(st.sampled_from([1, 2, 4]))}",
          "actor_rollout_ref.rollout.gpu_memory_utilization="
          f"{draw(st.sampled_from([0.3, 0.6, 0.9]))}",
          f"actor_rollout_ref.rollout.n={n}",
          f"trainer.nnodes={draw(st.integers(1, 8))}",
          f"trainer.n_gpus_per_node={draw(st.integers(1, 8))}"]


@st.composite
def _estimate_case(draw):
  response_max = draw(st.sampled_from([512, 2048, 8192]))
  argv = ["--from_verl", "run.txt",
          "--response_mean", str(draw(st.integers(response_max // 16, response_max)))]
  if draw(st.booleans()):
    argv += ["--gpu", draw(st.sampled_from(cm.hardware.names()))]
  if draw(st.booleans()):
    argv += ["--prompt_len", str(draw(st.integers(1, 4096)))]
  return _verl_run(draw, response_max), _spoil(draw, argv, ("--response_mean",))


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_estimate_case())
def test_estimate_estimates_or_refuses_in_one_line(tmp_path_factory, capsys, case):
  run, argv = case
  folder = tmp_path_factory.mktemp("run")
  (folder / "run.txt").write_text("\n".join(run))
  with pytest.MonkeyPatch.context() as mp:
    mp.chdir(folder)
    code = estimate_cli.call(argv)
  out, err = capsys.readouterr()
  _outcome("estimate", code, out, err)
  if code in (0, 1):
    assert re.search(r"^step [0-9.]+ s  mode sync", out, re.M), out


def _is_power_of_two(n: int) -> bool:
  return n & (n - 1) == 0


@pytest.mark.parametrize("framework", ["any", "nemo_rl"])
def test_every_cluster_shape_plans_or_refuses_in_one_line(capsys, framework):
  # GRPO, 512 prompts x 8 samples: a training pool of g GPUs has a data-parallel
  # degree dividing 4,096 exactly when g is a power of two (g = dp x 2^k). So the
  # colocated family holds a plan when nodes x GPUs is a power of two; the split
  # family whenever its training pool can be one (any count: 1 GPU, on 2 GPUs or
  # more); with NeMo-RL's whole nodes, a training pool of whole nodes of 3, 5, 6
  # or 7 GPUs is never a power of two, so such clusters of 2+ nodes are refused.
  refused = 0
  for nodes in range(1, 65):
    for gpus in range(1, 9):
      n = nodes * gpus
      code = plan_cli.call(["--check", "--nodes", str(nodes), "--gpus_per_node", str(gpus),
                            "--framework", framework])
      out, err = capsys.readouterr()
      _outcome("plan", code, out, err)
      split = n >= 2 and (framework == "any" or nodes == 1 or _is_power_of_two(gpus))
      colocated = _is_power_of_two(n)
      assert code == (0 if split or colocated else 2), (nodes, gpus, err)
      if code:
        refused += 1
        assert f"no plan on {nodes} x {gpus} H100: colocated: no training layout" in err
        continue
      searched = re.search(r"^families to search \(\w+\): (.*)$", out, re.M).group(1)
      assert searched.split(", ") == [f for f, ok in (("colocated", colocated),
                                                      ("split", split)) if ok], (nodes, gpus)
  assert refused == (0 if framework == "any" else 4 * 63)


def test_plan_on_three_nodes_searches_split_and_says_why_colocated_is_skipped(capsys):
  code = plan_cli.call(["--nodes", "3", "--model", "qwen2.5-1.5b", "--prompts", "128",
                        "--prompt_len", "512", "--response_mean", "1000", "--response_max",
                        "4096", "--starts", "2", "--relaxed", "off", "--top_k", "2"])
  out, err = capsys.readouterr()
  assert code == 0 and err == "", err
  assert ("skipped colocated: no training layout of 24 GPUs divides the 1,024-sample batch"
          in out)
  assert re.search(r"^#1 +[0-9.]+ s +split ", out, re.M)
  assert re.search(r"^to run the best plan:\n  add --out plan.json --export [a-z_,]+ to write",
                   out, re.M), out[-800:]
  assert "add --report plan.html" in out


def test_export_writes_what_each_framework_accepts_and_lists_the_refusals(tmp_path, capsys,
                                                                          monkeypatch):
  # veRL's Qwen3-8B example: its reference's log-prob micro-batch (12 a GPU) differs
  # from the actor's (10): slime and AReaL give every model one micro-batch setting.
  example = ROOT / "tests" / "data" / "verl_examples" / "run_qwen3_8b_fsdp_1dda039.txt"
  monkeypatch.chdir(tmp_path)
  code = estimate_cli.call(["--from_verl", str(example), "--response_mean", "900", "--out",
                            "p.json", "--export", "verl,openrlhf,nemo_rl,slime,areal"])
  out, err = capsys.readouterr()
  assert code == 0 and err == "", err
  written = re.findall(r"^wrote (p\.\w+\.\w+)$", out, re.M)
  refused = re.findall(r"^not exported to (\w+): (.+)$", out, re.M)
  assert written == ["p.verl.sh", "p.openrlhf.sh", "p.nemo_rl.yaml"]
  assert [fw for fw, _ in refused] == ["slime", "areal"]
  assert all("micro_batch" in why for _, why in refused)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", *sorted(written)]


def test_better_plans_of_a_dynamic_batch_run_change_its_token_budgets():
  # veRL's Qwen3-8B example runs use_dynamic_bsz=True with 24,576 tokens per GPU:
  # veRL ignores ppo_micro_batch_size_per_gpu there, so a new micro-batch is
  # advised as a token budget: micro-batch x (prompt + mean response) tokens.
  from search._src import framework_settings  # pylint: disable=g-import-not-at-top
  example = ROOT / "tests" / "data" / "verl_examples" / "run_qwen3_8b_fsdp_1dda039.txt"
  run = export.read_config("verl", str(example), response_mean=900)
  plan, job, cluster = run.plan, run.job, run.cluster
  actor = plan.role("actor")
  faster = plan.replace(roles=tuple(
      cm.RolePlan(r.role, r.pool, train=r.train.replace(micro_batch=4.0), infer=r.infer)
      if r.role == "actor" else r for r in plan.roles))
  lines = framework_settings.settings_diff("verl", plan, faster, job, cluster, run.settings)
  assert float(actor.train.micro_batch) != 4.0
  assert not any("ppo_micro_batch_size_per_gpu" in line for line in lines), lines
  seq = float(job.prompt_len) + 900.0  # 1,024 + 900 tokens
  assert (f"  actor_rollout_ref.actor.ppo_max_token_len_per_gpu: 24576 -> {int(4 * seq)}"
          in lines), lines
  # Without the run's settings the diff is in the exporter's keys.
  plain = framework_settings.settings_diff("verl", plan, faster, job, cluster)
  assert any("ppo_micro_batch_size_per_gpu" in line for line in plain), plain
