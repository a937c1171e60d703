"""Speculative decoding in the engine: expected tokens per step, cost per step,
draft memory, the shrinking gain at large batch, and a published pair."""

import csv
import importlib.resources

import jax
import jax.numpy as jnp
import pytest

import costmodel as cm
from costmodel._src.specs.speculative import Speculative
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import kv_state

EFF = cm.Efficiency()


def _rows():
  text = importlib.resources.files("costmodel").joinpath(
      "data/published_speculative.csv").read_text(encoding="utf-8")
  return list(csv.DictReader(text.splitlines()))


def _setup(row):
  """The row's model, GPU (datasheet capacity and bandwidth), job and one-GPU cluster."""
  model = cm.models.get(row["model"])
  base = cm.hardware.get("A100-80GB")  # the A100-40GB differs in capacity and bandwidth
  gpu = base.replace(name=row["gpu"], hbm_bytes=float(row["hbm_gb"]) * 2**30,
                     hbm_bandwidth_bytes_per_s=float(row["hbm_tb_per_s"]) * 1e12)
  out = float(row["output_tokens"])
  job = cm.RLJob("grpo", model, prompts_per_step=float(row["batch"]), samples_per_prompt=1.0,
                 prompt_len=float(row["prompt_tokens"]),
                 response=cm.ResponseLength.from_mean_max(out, out))
  return model, job, cm.Cluster(gpu, gpus_per_node=1, nodes=1)


def _decode_rate(model, job, cluster, engine):
  c = gen_lib.generate(model, job, engine, 1.0, cluster, EFF, controller=False)
  return float(c.extras["decode_tokens_per_s"]), c


@pytest.mark.parametrize("alpha, k", [(0.7, 1), (0.6, 3), (0.9, 5)])
def test_tokens_per_step_is_the_geometric_acceptance_length(alpha, k):
  spec = Speculative("eagle", draft_tokens=float(k), acceptance=alpha)
  assert float(spec.tokens_per_step()) == pytest.approx(
      sum(alpha**i for i in range(k + 1)), rel=1e-6)
  back = Speculative.from_acceptance_length("eagle", k, float(spec.tokens_per_step()))
  assert back.acceptance == pytest.approx(alpha, rel=1e-6)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["case"])
def test_published_pair_reproduced_within_20_percent(row):
  model, job, cluster = _setup(row)
  spec = Speculative.from_acceptance_length(row["draft_kind"], int(row["draft_tokens"]),
                                            float(row["acceptance_length"]))
  without, _ = _decode_rate(model, job, cluster, cm.Engine(tp=1.0))
  with_, _ = _decode_rate(model, job, cluster, cm.Engine(tp=1.0, speculative=spec))
  measured_without = float(row["tokens_per_s_without"])
  measured_with = float(row["tokens_per_s_with"])
  assert without == pytest.approx(measured_without, rel=0.20)
  assert with_ == pytest.approx(measured_with, rel=0.20)
  assert with_ / without == pytest.approx(measured_with / measured_without, rel=0.20)


def test_verify_pass_reads_once_and_computes_k_plus_one_tokens(cluster_2x8):
  model = cm.models.get("qwen2.5-7b")
  job = cm.RLJob("grpo", model)
  engine = cm.Engine(tp=1.0)

  def ratio(batch):
    plain = gen_lib.decode_round(model, job, engine, cluster_2x8, EFF, batch, 2048.0)
    verify = gen_lib.decode_round(model, job, engine, cluster_2x8, EFF, batch, 2048.0,
                                  tokens_per_seq=4.0)
    return float(sum(verify)) / float(sum(plain))

  # Batch 1: weights and KV are read once for the 4 tokens; their FLOPs hide under the reads.
  assert ratio(1.0) == pytest.approx(1.0, abs=0.01)
  # Batch 2048: the 4 tokens' FLOPs no longer hide (below 4x: the KV read is shared).
  assert 1.5 < ratio(2048.0) < 4.0


def test_gain_shrinks_at_large_batch(cluster_2x8):
  model = cm.models.get("qwen2.5-7b")
  spec = Speculative("eagle", draft_tokens=3.0, acceptance=0.7)  # E = 2.53 tokens per step
  engine = cm.Engine(tp=1.0, max_seqs=4096.0)
  gains = []
  for n in (1.0, 512.0, 2048.0):  # short sequences: the batch, not the KV cache, sets the work
    job = cm.RLJob("grpo", model, prompts_per_step=n, samples_per_prompt=1.0, prompt_len=128.0,
                   response=cm.ResponseLength.from_mean_max(256.0, 256.0))
    plain = gen_lib.generate(model, job, engine, 1.0, cluster_2x8, EFF)
    spec_c = gen_lib.generate(model, job, engine.replace(speculative=spec), 1.0, cluster_2x8,
                              EFF)
    gains.append(float(plain.extras["decode_s"]) / float(spec_c.extras["decode_s"]))
  assert 1.5 < gains[0] < 2.53     # memory bound: E less the draft's passes
  assert gains[0] > gains[1] > gains[2]
  # Compute bound: speculation loses. Per sequence and step at batch 2,048:
  # ~20 us of GEMMs and ~5 us of KV reads plain, ~80 us of GEMMs, the same KV
  # read and ~7 us of draft passes per verify round of 2.53 tokens; the
  # engine's ~20 us per-sequence overhead is paid per position sampled, 4 per
  # round: (20 + 5 + 20) / ((80 + 5 + 7 + 80) / 2.53) ~ 0.66.
  assert 0.6 < gains[2] < 0.75


def test_draft_memory_lowers_concurrency(cluster_2x8):
  target = cm.models.get("qwen2.5-32b")
  draft = cm.models.get("qwen2.5-1.5b")
  job = cm.RLJob("grpo", target, prompts_per_step=256.0, samples_per_prompt=8.0,
                 prompt_len=1024.0, response=cm.ResponseLength.from_mean_max(8000.0, 16384.0))
  engine = cm.Engine(tp=2.0, memory_fraction=0.9)
  spec_engine = engine.replace(speculative=Speculative("draft", 4.0, 0.6, draft_model=draft))
  plain = gen_lib.generate(target, job, engine, 2.0, cluster_2x8, EFF)
  spec = gen_lib.generate(target, job, spec_engine, 2.0, cluster_2x8, EFF)
  # The draft's weights, split over TP 2, sit next to the target's.
  extra = float(spec.memory.weights) - float(plain.memory.weights)
  assert extra == pytest.approx(draft.total_params * 2.0 / 2.0, rel=1e-6)
  # Its KV cache adds per token: 28 layers x 2 x 2 KV heads x 128 x 2 bytes (2 heads over TP 2).
  per_seq = float(kv_state.seq_cache_bytes_per_gpu(target, spec_engine, 2.0, 1000.0)
                  - kv_state.seq_cache_bytes_per_gpu(target, engine, 2.0, 1000.0))
  assert per_seq == pytest.approx(28 * 2 * 2 * 128 * 2 / 2.0 * 1000.0, rel=1e-3)
  assert float(spec.extras["concurrency"]) < float(plain.extras["concurrency"])


def test_mtp_uses_the_models_own_layers():
  v3 = cm.models.get("deepseek-v3")
  Speculative("mtp", 1.0, 0.8).check_model(v3)
  with pytest.raises(ValueError, match="kind='mtp' needs a model with MTP layers.*qwen2.5-7b"):
    Speculative("mtp", 1.0, 0.8).check_model(cm.models.get("qwen2.5-7b"))


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="medusa"), r"kind='medusa' is not one of"),
    (dict(kind="eagle", acceptance=1.0), r"acceptance=1.0 must lie in \(0, 1\)"),
    (dict(kind="eagle", acceptance=0.0), r"acceptance=0.0 must lie in \(0, 1\]"),
    (dict(kind="eagle", draft_tokens=0.5), r"draft_tokens=0.5 must be >= 1"),
    (dict(kind="draft"), r"kind='draft' with draft_model=None"),
])
def test_bad_speculative_settings_refused(kwargs, match):
  with pytest.raises(ValueError, match=match):
    Speculative(**kwargs)
  with pytest.raises(ValueError, match=r"acceptance_length=3.5 must lie in \(1, draft_tokens"):
    Speculative.from_acceptance_length("eagle", 2, 3.5)


def test_gradient_wrt_acceptance_is_finite_and_speeds_decode(cluster_2x8):
  model = cm.models.get("qwen2.5-7b")
  job = cm.RLJob("grpo", model, prompts_per_step=4.0, samples_per_prompt=1.0)

  def decode_s(alpha):
    engine = cm.Engine(tp=1.0, speculative=Speculative("eagle", 3.0, alpha))
    return gen_lib.generate(model, job, engine, 1.0, cluster_2x8, EFF).extras["decode_s"]

  g = jax.grad(decode_s)(jnp.asarray(0.6))
  assert jnp.isfinite(g) and g < 0
  leaves = jax.tree_util.tree_leaves(cm.Engine(speculative=Speculative("eagle", 3.0, 0.6)))
  assert len(leaves) == len(jax.tree_util.tree_leaves(cm.Engine())) + 2
