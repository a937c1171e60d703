"""``export.adapt``: a hand-built plan adapted to what each framework forces, one line per
changed setting naming the framework code that forces it; what a framework cannot run at
all is still refused by name; a conforming plan adapts to itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_export import ONE_NODE
from test_export import QWEN7B
from test_export import colocated_grpo
from test_export import refusal
from test_export import split_async_grpo

import costmodel as cm
import export

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _with(plan, role, **fields):
  """``plan`` with ``fields`` set on ``role``'s layouts (both phases)."""
  roles = tuple(cm.RolePlan(r.role, r.pool, train=r.train and r.train.replace(**fields),
                            infer=r.infer_layout.replace(**fields)) if r.role == role else r
                for r in plan.roles)
  return plan.replace(roles=roles)


def _zero1(plan):
  """Megatron's distributed optimizer for every model (slime trains with Megatron only)."""
  return _with(_with(plan, "actor", zero_stage=1.0), "reference", zero_stage=1.0)


def _one_gpu_engine(plan):
  """One GPU per engine (AReaL's colocated rollout reuses each actor worker)."""
  return plan.replace(engine=plan.engine.replace(tp=1))


def _sync(plan, backend):
  return plan.replace(engine=plan.engine.replace(sync_backend=backend))


# (framework, plan builder, what the strict exporter refused, the change lines expected)
FORCED = [
    ("nemo_rl", lambda p: _sync(p, "ipc"), "actor.train.swap=0",
     ["actor.train.swap: 0 -> 1 (NeMo-RL forces it: grpo.py refit_policy_generation"]),
    ("nemo_rl", lambda p: _with(p, "actor", swap=1.0), "engine.sync_backend='per_tensor'",
     ["engine.sync_backend: 'per_tensor' -> 'ipc' (NeMo-RL forces it: "
      "policy.generation.refit_transport"]),
    ("verl", lambda p: p, "reference.infer.offload=0",
     ["reference.infer.offload: 0 -> 1 (veRL forces it: the FSDP reference is forward_only"]),
    ("verl", lambda p: _sync(_with(p, "reference", offload=1.0), "bucketed"),
     "engine.sync_backend='bucketed'",
     ["engine.sync_backend: 'bucketed' -> 'per_tensor' (veRL forces it: "
      "verl/checkpoint_engine/base.py"]),
    ("openrlhf", lambda p: p, "engine.sync_backend='per_tensor'",
     ["engine.sync_backend: 'per_tensor' -> 'ipc' (OpenRLHF forces it: CUDA IPC"]),
    ("slime", lambda p: _sync(_zero1(p), "ipc"), "reference.infer.swap=0",
     ["reference.infer.swap: 0 -> 1 (slime forces it: tensor_backper.py"]),
    ("areal", lambda p: _sync(_one_gpu_engine(p), "bucketed"), "actor.train.swap=0",
     ["actor.train.swap: 0 -> 1 (AReaL forces it: rl_trainer.py _should_offload_actor"]),
    ("areal", lambda p: _sync(_with(_with(_one_gpu_engine(p), "actor", swap=1.0), "reference",
                                    offload=1.0, swap=0.0), "bucketed"),
     "reference.infer.offload=1",
     ["reference.infer.offload: 1 -> 0 (AReaL forces it: the ref engine has no parameters",
      "reference.infer.swap: 0 -> 1 (AReaL forces it: ref.offload moves"]),
]


def _options(fw):
  return {"vllm_default_max_seqs": True} if fw == "openrlhf" else {}


@pytest.mark.parametrize("fw,build,refused,expected", FORCED,
                         ids=[f"{f[0]}-{f[2]}" for f in FORCED])
def test_a_forced_setting_is_adapted_and_named(fw, build, refused, expected):
  plan, job, cluster = colocated_grpo()
  plan = build(plan)
  e = export.get(fw)
  opts = _options(fw)
  refusal(lambda: e.to_config(plan, job, cluster, **opts), refused)  # strict: refused
  adapted, changes = export.adapt(fw, job, plan, cluster, **opts)
  assert len(changes) == len(expected), changes
  for want in expected:
    assert sum(c.startswith(want) for c in changes) == 1, (want, changes)
  assert all(c.endswith(")") and " -> " in c for c in changes)
  cm.validate_plan(job, adapted, cluster)
  e.to_config(adapted, job, cluster, **opts)  # the adapted plan exports as is
  assert e.export(plan, job, cluster, **opts) == e.export(adapted, job, cluster, **opts)
  assert export.adapt(fw, job, adapted, cluster, **opts) == (adapted, [])


def test_the_estimate_is_that_of_the_plan_as_run():
  # NeMo-RL swaps the colocated policy's state to the host around generation: the adapted
  # plan moves the actor's weights, gradients and optimizer state out and back each step,
  # which the resident plan does not, so it costs more.
  plan, job, cluster = colocated_grpo()
  adapted, changes = export.adapt("nemo_rl", job, _sync(plan, "ipc"), cluster)
  assert [c.split(":")[0] for c in changes] == ["actor.train.swap"]
  before = float(cm.estimate(job, _sync(plan, "ipc"), cluster).step_time_s)
  after = float(cm.estimate(job, adapted, cluster).step_time_s)
  assert after > before
  assert adapted.role("actor").train.swap == 1.0
  assert adapted.role("actor").infer_layout.swap == 1.0


def test_a_split_plan_adapts_to_nccl_buckets_apart():
  # Apart from the rollout, veRL's nccl checkpoint engine sends buckets; the per-tensor
  # loads of the colocated placement are not available.
  plan, job, cluster = split_async_grpo()
  adapted, changes = export.adapt("verl", job, _sync(plan, "per_tensor"), cluster)
  assert adapted.engine.sync_backend == "bucketed"
  assert any(c.startswith("engine.sync_backend: 'per_tensor' -> 'bucketed' (veRL forces it")
             for c in changes), changes


def test_conforming_plans_adapt_to_themselves():
  plan, job, cluster = colocated_grpo()
  for fw in export.FRAMEWORKS:
    opts = _options(fw)
    as_run = export.get(fw).adapt(plan, **opts)
    assert export.adapt(fw, job, as_run, cluster, **opts) == (as_run, []), fw


def test_what_a_framework_cannot_run_is_still_refused():
  # ReMax has no setting in OpenRLHF (adapting changes no algorithm); FSDP has no TP in veRL.
  remax = cm.RLJob("remax", QWEN7B, prompts_per_step=64)
  plan = cm.Plan.colocated(remax, ONE_NODE, engine=cm.Engine(tp=2))
  adapted, _ = export.adapt("openrlhf", remax, plan, ONE_NODE, vllm_default_max_seqs=True)
  refusal(lambda: export.get("openrlhf").export(adapted, remax, ONE_NODE,
                                                vllm_default_max_seqs=True), "algorithm='remax'")
  plan, job, cluster = colocated_grpo()
  tp2 = _with(plan, "actor", tp=2.0, cp=1)
  refusal(lambda: export.get("verl").export(tp2, job, cluster, strategy="fsdp"),
          "actor.train.tp=2")


def test_bad_input_is_refused_by_name():
  plan, job, cluster = colocated_grpo()
  refusal(lambda: export.adapt("megatron", job, plan, cluster), "framework='megatron'")
  # The plan is checked against the job and cluster before adapting (validate_plan).
  refusal(lambda: export.adapt("verl", job, plan, cm.Cluster("H100", 4, 1)),
          "pools hold 8 GPUs, more than the cluster's 4")


def test_estimate_cli_prints_what_the_export_adapts(tmp_path):
  plan, job, cluster = colocated_grpo()
  plan = _sync(plan, "ipc")
  export.write_plan(str(tmp_path / "plan.json"), plan, job=job, cluster=cluster)
  env = dict(os.environ, PYTHONPATH=ROOT)
  r = subprocess.run([sys.executable, "-m", "search.estimate_cli", "--plan", "plan.json",
                      "--export", "nemo_rl"], capture_output=True, text=True, env=env,
                     cwd=tmp_path, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  adapted, changes = export.adapt("nemo_rl", job, plan, cluster, backend="dtensor")
  assert f"  nemo_rl adapts {changes[0]}" in r.stdout.splitlines()
  step = float(cm.estimate(job, adapted, cluster).step_time_s)
  assert f"  as nemo_rl runs it: {step:.4g} s/step" in r.stdout.splitlines()
  assert (tmp_path / "plan.nemo_rl.yaml").read_text().startswith("# NeMo-RL export")
