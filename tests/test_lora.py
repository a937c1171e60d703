"""LoRA training of the actor: memory, compute, reference sharing, sync bytes,
and the published runs it makes expressible."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import costmodel as cm
from costmodel._src.fit.validation import lora_cases
from costmodel._src.ops import lora as lora_lib
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import registry
from costmodel._src.step import algorithms
from costmodel._src.step.result import MEMORY_PARTS

# Qwen2.5-7B, rank 32 on every linear layer: per layer
# q (3584 + 3584) + k (3584 + 512) + v (3584 + 512) + o (3584 + 3584)
# + gate, up (3584 + 18944 each) + down (18944 + 3584) = 90,112; x 32 x 28 layers.
QWEN7B_R32_ADAPTERS = 90_112 * 32 * 28
GPUS = 8


@pytest.fixture(scope="module")
def setup():
  model = cm.models.get("qwen2.5-7b")
  job = cm.RLJob("grpo", model, prompts_per_step=64.0, samples_per_prompt=4.0,
                 prompt_len=512.0, response=cm.ResponseLength.from_mean_max(600.0, 1024.0))
  cluster = cm.Cluster(cm.hardware.get("H100"), GPUS, 1)
  train = cm.Parallel(micro_batch=4.0, zero_stage=3.0, recompute=0.0)
  plan = cm.Plan.colocated(job, cluster, train=train, engine=cm.Engine(tp=1.0))
  lora_job = job.replace(lora=cm.LoRA(32.0))
  return job, lora_job, plan, cluster


def _memory(est, stage):
  i = est.stage_names.index(stage)
  return dict(zip(MEMORY_PARTS, np.asarray(est.memory_bytes)[i], strict=True))


def test_adapter_parameters_by_hand():
  model = cm.models.get("qwen2.5-7b")
  assert lora_lib.adapter_params(model, cm.LoRA(32.0)) == QWEN7B_R32_ADAPTERS
  # q and v only: (3584 + 3584 + 3584 + 512) x 16 x 28.
  assert lora_lib.adapter_params(model, cm.LoRA(16.0, targets=("q", "v"))) == (
      11_264 * 16 * 28)
  assert lora_lib.adapter_tensors(model, cm.LoRA(32.0)) == 2 * 7 * 28
  # OPT has no gate projection: "gate" adds nothing.
  opt = cm.models.get("opt-1.3b")
  assert lora_lib.adapter_params(opt, cm.LoRA(8.0, targets=("up", "gate"))) == (
      8 * (2048 + 8192) * 24)


def test_lora_spec_rejects_bad_input():
  with pytest.raises(ValueError, match="rank"):
    cm.LoRA(0.0)
  with pytest.raises(ValueError, match="targets"):
    cm.LoRA(8.0, targets=("qkv",))
  with pytest.raises(ValueError, match="sync"):
    cm.LoRA(8.0, sync="delta")
  with pytest.raises(ValueError, match="lora"):
    cm.RLJob("grpo", cm.models.get("qwen2.5-7b"), lora=8)


def test_memory_frozen_base_holds_weights_only(setup):
  job, lora_job, plan, cluster = setup
  full, lora = cm.estimate(job, plan, cluster), cm.estimate(lora_job, plan, cluster)
  params = cm.models.get("qwen2.5-7b").total_params
  m_full, m_lora = _memory(full, "actor_update"), _memory(lora, "actor_update")
  # ZeRO-3 over 8 GPUs: full fine-tuning shards 2 + 2 + 12 bytes per parameter.
  assert m_full["weights"] == pytest.approx(params * 2 / GPUS, rel=1e-6)
  assert m_full["gradients"] == pytest.approx(params * 2 / GPUS, rel=1e-6)
  # LoRA: the base's BF16 weights plus the adapters' weights; gradients and
  # Adam states of the adapters only.
  a = QWEN7B_R32_ADAPTERS
  assert m_lora["weights"] == pytest.approx((params + a) * 2 / GPUS, rel=1e-6)
  assert m_lora["gradients"] == pytest.approx(a * 2 / GPUS, rel=1e-6)
  # The optimizer row also carries the reference's resident weights.
  m_ref_full = _memory(full, "reference")["weights"]
  assert m_lora["optimizer"] == pytest.approx(a * 12 / GPUS, rel=1e-6)
  assert m_full["optimizer"] == pytest.approx(params * 12 / GPUS + m_ref_full, rel=1e-6)
  assert m_lora["activations"] == pytest.approx(m_full["activations"], rel=1e-6)
  # Well below: 16 bytes per parameter -> about 2 (the frozen BF16 base).
  total = lambda m: sum(m[k] for k in ("weights", "gradients", "optimizer"))  # noqa: E731
  assert total(m_lora) < 0.15 * total(m_full)


def test_reference_shares_the_frozen_base(setup):
  job, lora_job, plan, cluster = setup
  full, lora = cm.estimate(job, plan, cluster), cm.estimate(lora_job, plan, cluster)
  assert _memory(full, "reference")["weights"] == pytest.approx(
      cm.models.get("qwen2.5-7b").total_params * 2 / GPUS, rel=1e-6)
  assert _memory(lora, "reference")["weights"] == 0.0
  own = cm.estimate(job.replace(lora=cm.LoRA(32.0, shared_reference=False)), plan, cluster)
  assert _memory(own, "reference")["weights"] == pytest.approx(
      _memory(full, "reference")["weights"], rel=1e-6)
  # The reference's forward costs what it did.
  assert lora.stage("reference")["time_s"] == pytest.approx(
      full.stage("reference")["time_s"], rel=1e-6)


def test_compute_skips_the_base_weight_gradients(setup):
  job, lora_job, plan, cluster = setup
  full, lora = cm.estimate(job, plan, cluster), cm.estimate(lora_job, plan, cluster)
  f, g = full.stage("actor_update"), lora.stage("actor_update")
  model = cm.models.get("qwen2.5-7b")
  a = QWEN7B_R32_ADAPTERS / model.matmul_params_per_token
  # GEMMs: (2 + 3a) forwards instead of 3; attention unchanged, so the
  # compute ratio lies between the GEMM ratio and 1.
  assert (2 + 3 * a) / 3 < g["compute_s"] / f["compute_s"] < 1.0
  assert g["time_s"] < f["time_s"]
  # Data-parallel traffic: ZeRO-3 still gathers the frozen weights (forward
  # and backward) but reduces only the adapters' gradients.
  assert g["comm_s"] < f["comm_s"]
  # Model FLOPs: 3 F per token -> 3 F - G (1 - 3a), G the GEMM FLOPs.
  ctx = 0.5 * (512 + float(job.response.mean))
  fwd = model.forward_flops_per_token(ctx)
  gemm = 2.0 * model.matmul_params_per_token
  ratio = (3 * fwd - gemm * (1 - 3 * a)) / (3 * fwd)
  i = full.stage_names.index("actor_update")
  assert (np.asarray(lora.work_gpu_s)[i] / np.asarray(full.work_gpu_s)[i]
          == pytest.approx(ratio, rel=1e-5))


def test_sync_moves_only_the_adapters(setup):
  job, lora_job, plan, cluster = setup
  gpus = {p.name: float(p.gpus) for p in plan.pools}
  stage = next(s for s in algorithms.stage_graph(job) if s.name == "weight_sync")
  eff = cm.Efficiency()
  full = registry.stage_cost(stage, job, plan, cluster, gpus, eff)
  lora = registry.stage_cost(stage, lora_job, plan, cluster, gpus, eff)
  assert float(lora.extras["bytes_moved"]) == pytest.approx(QWEN7B_R32_ADAPTERS * 2.0)
  assert float(full.extras["bytes_moved"]) == pytest.approx(
      cm.models.get("qwen2.5-7b").total_params * 2.0)
  assert float(lora.time_s) < float(full.time_s)
  merged = registry.stage_cost(stage, job.replace(lora=cm.LoRA(32.0, sync="merged")), plan,
                               cluster, gpus, eff)
  assert float(merged.extras["bytes_moved"]) == float(full.extras["bytes_moved"])


def test_lora_estimate_jits_and_differentiates(setup):
  _, lora_job, plan, cluster = setup
  step = jax.jit(lambda p: cm.estimate(lora_job, p, cluster, tau=0.05).step_time_s)
  g = jax.grad(lambda p: cm.estimate(lora_job, p, cluster, tau=0.05).step_time_s)(plan)
  assert np.isfinite(float(step(plan)))
  assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(g))


def test_dschat_rows_become_expressible():
  runs = lora_cases.dschat_lora_runs()
  assert {r.row_ids[0] for r in runs} == {"rl:103", "rl:104", "rl:110"}
  for run in runs:
    full = cm.estimate(run.job.replace(lora=None), run.plan, run.cluster)
    est = cm.estimate(run.job, run.plan, run.cluster)
    assert not bool(full.feasible), run.label
    assert bool(est.feasible), (run.label, est.violations)
    error = float(est.step_time_s) * run.scale / run.step_s - 1.0
    print(f"{run.row_ids[0]} {run.label}: error {error:+.1%}")
    assert -0.7 < error < 0.7


def test_verl_lora_max_batch_row_fits_at_a_smaller_batch():
  row = next(r for r in lora_cases.VERL_ROWS if r.row_id == "N27:32b")
  assert lora_cases.fits(row, 128)
  assert not lora_cases.fits(row, 512)


def test_engine_workspace_follows_the_profile_run():
  model = cm.models.get("qwen2.5-7b")
  engine = cm.Engine(max_seqs=512.0, max_batched_tokens=1536.0)
  # Per token of one layer: gate, up and activated MLP outputs 3 x 18944, q, k, v
  # and attention output (2 x 28 + 2 x 4) x 128, residual and input 2 x 3584, in
  # BF16; the sampler's float32 logits and probabilities of min(512, 1536) rows.
  per_token = 3 * 18944 + 64 * 128 + 2 * 3584
  want = 1536 * per_token * 2 + 512 * 152064 * 4 * 2
  assert float(gen_lib.workspace_bytes(model, engine)) == pytest.approx(want, rel=1e-6)
  tp2 = float(gen_lib.workspace_bytes(model, engine.replace(tp=2.0)))
  assert tp2 == pytest.approx(want - 1536 * (3 * 18944 + 64 * 128) * 2 / 2, rel=1e-6)
  rows = float(gen_lib.workspace_bytes(model, engine.replace(max_batched_tokens=256.0)))
  assert rows == pytest.approx(256 * per_token * 2 + 256 * 152064 * 8, rel=1e-6)
  assert float(gen_lib.workspace_bytes(model, cm.Engine())) == gen_lib.WORKSPACE_BYTES
  with pytest.raises(ValueError, match="max_batched_tokens=0"):
    cm.Engine(max_batched_tokens=0.0)


def test_verl_7b_lora_row_fits_with_its_scripts_token_budget():
  row = next(r for r in lora_cases.VERL_ROWS if r.row_id == "N27:7b")
  assert row.max_batched_tokens == 1536.0
  job, plan, cluster = lora_cases.verl_lora_setup(row, 10)
  est = cm.estimate(job, plan, cluster)
  gen = est.stage_names.index("generate")
  assert bool(est.feasible) and float(est.memory_excess[gen]) == 0.0
  # With the fixed 2 GiB workspace the engine (0.2 x 80 GiB less 14.2 GiB of
  # weights) has no room for one sequence's KV.
  fixed = plan.replace(engine=plan.engine.replace(max_batched_tokens=None))
  assert float(cm.estimate(job, fixed, cluster).memory_excess[gen]) > 0.0
  assert lora_cases.predicted_max_batch(row) > 0


def test_lora_cases_name_their_rows():
  cases = lora_cases.cases()
  assert {c.row_id for c in cases if c.group == "rl_lora"} == {"rl:103", "rl:104", "rl:110"}
  assert {c.row_id: c.published for c in cases if c.group == "lora_max_batch"} == {
      "N27:1.5b": 128, "N27:7b": 100, "N27:32b": 180, "N27:72b": 176}
