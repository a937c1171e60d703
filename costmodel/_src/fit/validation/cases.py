"""Published measurements as prediction cases.

A :class:`Case` pairs one published figure (a row of the packaged tables in
``costmodel/data``) with a function that predicts it from the efficiency
parameters through the same cost-model functions the estimate uses. Cases are
what the validation tests, the README's accuracy table, the fidelity report
and :func:`costmodel.calibrate` share.

Configuration that a source leaves out is filled in by an assumption stated in
the case's ``note``; cases whose missing fields cannot be bounded are left out
(see :data:`SKIPPED`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from costmodel._src.ops import collectives
from costmodel._src.ops import roofline
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import hardware as hw_lib
from costmodel._src.specs import precision as precision_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.model import ModelSpec
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import train as train_lib
from costmodel._src.units import GIB


class Case(NamedTuple):
  """One published figure and its prediction.

  Attributes:
    row_id: ``table:id`` of the source row.
    group: ``training``, ``memory``, ``kernel``, ``decode``, ``collective``,
      ``rl_step`` or ``rl_stage``.
    label: Short description.
    published: The published value.
    unit: Its unit.
    predict: ``Efficiency -> value`` in the same unit (a JAX scalar).
    note: Assumptions made for missing configuration.
  """

  row_id: str
  group: str
  label: str
  published: float
  unit: str
  predict: Callable[[Efficiency], jnp.ndarray]
  note: str = ""


def _gpt(name: str, layers_: int, hidden: int, heads: int, vocab: int = 51200) -> ModelSpec:
  """GPT-style model of the Megatron papers (MHA, 4h MLP with GELU, biases)."""
  return ModelSpec(name=name, n_layers=layers_, hidden=hidden, n_heads=heads,
                   n_kv_heads=heads, head_dim=hidden // heads, ffn_hidden=4 * hidden,
                   vocab=vocab, gated_mlp=False, tied_embeddings=True, linear_bias=True,
                   learned_positions=2048)


def _pretrain_job(model: ModelSpec, global_batch: int) -> RLJob:
  return RLJob("grpo", model, prompts_per_step=float(global_batch), samples_per_prompt=1.0,
               prompt_len=1.0, response=ResponseLength.from_mean_max(2047.0, 2047.0, bins=1))


def _iteration_time(model, global_batch, tp, pp, micro_batch, recompute, sp, vpp, n_gpus,
                    eff, seq=2048.0):
  cluster = Cluster(hw_lib.get("A100-80GB"), 8, max(n_gpus // 8, 1))
  layout = Parallel(tp=float(tp), pp=float(pp), micro_batch=float(micro_batch), zero_stage=1.0,
                    recompute=float(recompute), sequence_parallel=sp, flash_attention=False,
                    vpp=float(vpp))
  cost = train_lib.train(model, _pretrain_job(model, global_batch), layout, float(n_gpus),
                         cluster, eff, global_batch=float(global_batch), seq_len=seq,
                         updates=1.0)
  return cost


# Korthikanti et al. 2022, Table 5 (as encoded in Calculon's validation): GPT
# 22B / 175B / 530B / 1T on A100-80GB, seq 2048.
_KORTHIKANTI = (
    # id_full, id_sp, name, layers, hidden, heads, tp, pp, batch, micro, vpp, full_s, sp_s
    (21, 22, "GPT-22B", 48, 6144, 64, 8, 1, 4, 4, 1, 1.42, 1.10),
    (23, 24, "GPT-175B", 96, 12288, 96, 8, 8, 64, 1, 3, 18.13, 13.75),
    (25, 26, "GPT-530B", 105, 20480, 128, 8, 35, 280, 1, 3, 49.05, 37.83),
    (27, 28, "GPT-1T", 128, 25600, 160, 8, 64, 512, 1, 1, 94.42, 71.49),
)

# Korthikanti et al. 2022 activation memory (Fig. 7 as read by Calculon).
_MEMORY = ((30, 59.25, 9.5625), (31, 66.84375, 12.3515625), (32, 114.0234375, 23.076171875),
           (33, 131.25, 26.5625))

# Narayanan et al. SC'21 Table 1 (Megatron-LM README, April 2021): achieved
# TFLOP/s per GPU with the recompute FLOP convention.
_MEGATRON = (
    # id, name, hidden, layers, heads, tp, pp, dp, batch, tflops
    (1, "GPT-1.7B", 2304, 24, 24, 1, 1, 32, 512, 137),
    (2, "GPT-3.6B", 3072, 30, 32, 2, 1, 32, 512, 138),
    (3, "GPT-7.5B", 4096, 36, 32, 4, 1, 32, 512, 142),
    (4, "GPT-18B", 6144, 40, 48, 8, 1, 32, 1024, 135),
    (5, "GPT-39B", 8192, 48, 64, 8, 2, 32, 1536, 138),
    (6, "GPT-76B", 10240, 60, 80, 8, 4, 32, 1792, 140),
    (7, "GPT-145B", 12288, 80, 96, 8, 8, 24, 2304, 148),
    (8, "GPT-310B", 16384, 96, 128, 8, 16, 15, 2160, 155),
    (9, "GPT-530B", 20480, 105, 128, 8, 35, 9, 2520, 163),
    (10, "GPT-1T", 25600, 128, 160, 8, 64, 6, 3072, 163),
)


def megatron_flops(batch, seq, layers_, hidden, vocab) -> float:
  """Narayanan et al. eq. (3): FLOPs per iteration counting full recompute."""
  return 96.0 * batch * seq * layers_ * hidden**2 * (
      1.0 + seq / (6.0 * hidden) + vocab / (16.0 * layers_ * hidden))


def training_cases() -> list[Case]:
  cases = []
  for id_f, id_s, name, nl, h, a, tp, pp, b, mb, v, full_s, sp_s in _KORTHIKANTI:
    model = _gpt(name, nl, h, a)
    n = tp * pp

    def full(eff, model=model, b=b, tp=tp, pp=pp, mb=mb, v=v, n=n):
      return _iteration_time(model, b, tp, pp, mb, 2, False, v, n, eff).time_s

    def sel(eff, model=model, b=b, tp=tp, pp=pp, mb=mb, v=v, n=n):
      return _iteration_time(model, b, tp, pp, mb, 1, True, v, n, eff).time_s

    cases.append(Case(f"training_inference:{id_f}", "training",
                      f"{name} full recompute, TP{tp} PP{pp}", full_s, "s/iter", full))
    cases.append(Case(f"training_inference:{id_s}", "training",
                      f"{name} SP + selective, TP{tp} PP{pp}", sp_s, "s/iter", sel))
  for rid, name, h, nl, a, tp, pp, dp, b, tflops in _MEGATRON:
    model = _gpt(name, nl, h, a)
    n = tp * pp * dp
    flops = megatron_flops(b, 2048, nl, h, 51200)
    vpp = 1

    def rate(eff, model=model, b=b, tp=tp, pp=pp, n=n, flops=flops, vpp=vpp):
      t = _iteration_time(model, b, tp, pp, 1, 2, False, vpp, n, eff).time_s
      return flops / t / n / 1e12

    cases.append(Case(f"training_inference:{rid}", "training",
                      f"{name} TP{tp} PP{pp} DP{dp} (Megatron-LM)", float(tflops),
                      "TFLOP/s/GPU", rate,
                      "full recompute, micro-batch 1, no SP; interleaving (v=2) where "
                      "layers allow [assumed: the table does not give them]"))
  return cases


def memory_cases() -> list[Case]:
  cases = []
  for (rid, none_gib, sel_gib), spec in zip(_MEMORY, _KORTHIKANTI, strict=True):
    _, _, name, nl, h, a, tp, pp, b, mb, v, _, _ = spec
    model = _gpt(name, nl, h, a)

    def act(eff, model=model, b=b, tp=tp, pp=pp, mb=mb, v=v, rc=0, sp=False):
      del eff
      return _iteration_time(model, b, tp, pp, mb, rc, sp, v, tp * pp,
                             Efficiency()).memory.activations / GIB

    cases.append(Case(f"training_inference:{rid}", "memory",
                      f"{name} activations, no recompute", none_gib, "GiB",
                      lambda eff, f=act: f(eff, rc=0, sp=False)))
    cases.append(Case(f"training_inference:{rid}", "memory",
                      f"{name} activations, SP + selective", sel_gib, "GiB",
                      lambda eff, f=act: f(eff, rc=1, sp=True)))
  return cases


def gemm_rate(hw, m, n, k, eff, dtype="bf16", groups=1):
  """Achieved TFLOP/s of ``groups`` GEMMs of ``m`` x ``n`` x ``k`` (inputs in
  ``dtype``, BF16 output), each timed at its own shape."""
  in_bytes = precision_lib.DTYPE_BYTES[dtype]
  flops = 2.0 * m * n * k * groups
  nbytes = groups * (in_bytes * (m * k + k * n) + 2.0 * m * n)
  t = roofline.roofline(flops, nbytes, float(m), hw, eff, n_ops=float(groups), n=float(n),
                        k=float(k), dtype=dtype).time_s
  return flops / t / 1e12


def _gemm_rate(hw_name, m, n, k, eff):
  return gemm_rate(hw_lib.get(hw_name), m, n, k, eff)


def _gemv_bandwidth(hw_name, m, n, k, eff):
  hw = hw_lib.get(hw_name)
  flops = 2.0 * m * n * k
  weight = 2.0 * k * n
  nbytes = weight + 2.0 * (m * k + m * n)
  return weight / roofline.roofline(flops, nbytes, float(m), hw, eff, n=float(n),
                                    k=float(k)).time_s / 1e9


def kernel_cases() -> list[Case]:
  rows = (
      (76, "A100-80GB", 4096, 12288, 12288, 277.5, "LLMCompass FP16 GEMM 4096x12288x12288"),
      (77, "A100-80GB", 8192, 12288, 12288, 286.9, "LLMCompass FP16 GEMM 8192x12288x12288"),
      (78, "A100-80GB", 8192, 16384, 16384, 293.0, "LLMCompass FP16 GEMM 8192x16384x16384"),
      (79, "H100", 4096, 57344, 8192, 679.0, "Vidur Llama-2-70B mlp_up, 4096 tokens"),
      (80, "H100", 4096, 8192, 28672, 727.0, "Vidur Llama-2-70B mlp_down, 4096 tokens"),
      (81, "H100", 256, 57344, 8192, 625.0, "Vidur Llama-2-70B mlp_up, 256 tokens"),
      (83, "A100-80GB", 4096, 57344, 8192, 241.0, "Vidur Llama-2-70B mlp_up, 4096 tokens"),
  )
  cases = [Case(f"training_inference:{rid}", "kernel", label, pub, "TFLOP/s",
                lambda eff, h=h, m=m, n=n, k=k: _gemm_rate(h, m, n, k, eff),
                "A100 rows: the preset's matmul_efficiency_max (0.80) sits between "
                "bare cuBLAS (LLMCompass) and PyTorch (Vidur) figures" if "A100" in h else "")
           for rid, h, m, n, k, pub, label in rows]
  # M = 64 on A100 is memory bound: compare the achieved TFLOP/s.
  cases.append(Case("training_inference:75", "kernel", "LLMCompass FP16 GEMM 64x12288x12288",
                    101.7, "TFLOP/s",
                    lambda eff: _gemm_rate("A100-80GB", 64, 12288, 12288, eff)))
  cases.append(Case("training_inference:82", "kernel", "Vidur mlp_up GEMV-like, 16 tokens (H100)",
                    3070.0, "GB/s", lambda eff: _gemv_bandwidth("H100", 16, 57344, 8192, eff)))
  cases.append(Case("training_inference:84", "kernel",
                    "Vidur mlp_up GEMV-like, 16 tokens (A100)", 1535.0, "GB/s",
                    lambda eff: _gemv_bandwidth("A100-80GB", 16, 57344, 8192, eff)))
  return cases


_GPT13B = ModelSpec(name="gpt-13b", n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40,
                    head_dim=128, ffn_hidden=20480, vocab=50272, gated_mlp=False,
                    tied_embeddings=True, linear_bias=True, learned_positions=2048)


# Mistral-7B-v0.3 (mistralai/Mistral-7B-Instruct-v0.3 config.json): 32 layers,
# width 4,096, 32 heads, 8 KV heads, SwiGLU 14,336, vocabulary 32,768.
_MISTRAL7B = ModelSpec(name="mistral-7b-v0.3", n_layers=32, hidden=4096, n_heads=32,
                       n_kv_heads=8, head_dim=128, ffn_hidden=14336, vocab=32768)


def _a100_40gb():
  # A100-40GB SXM: 1,555 GB/s HBM2, 40 GB; otherwise as the 80 GB part.
  return hw_lib.get("A100-80GB").replace(name="A100-40GB", hbm_bytes=40 * GIB,
                                         hbm_bandwidth_bytes_per_s=1555e9)


def _ft_job(prompt: float):
  return RLJob("grpo", _GPT13B, prompts_per_step=1.0, samples_per_prompt=1.0,
               prompt_len=prompt, response=ResponseLength.from_mean_max(10.0, 10.0, bins=1))


# vLLM 0.5's OpenAI server ran in the engine's process: 33% of the time of
# Llama-3-8B serving on one H100 (vLLM blog 2024-09-05, "vLLM v0.6.0: 2.7x
# Throughput Improvement", profile of v0.5.3). Serving rows only: RL rollouts
# call the engine directly.
API_SERVER_SHARE = 0.33


def decode_cases() -> list[Case]:
  cases = []
  for rid_pf, rid_dec, tp, pf_ms, dec_ms in ((43, 44, 1, 63.17, 22.0), (45, 46, 2, 45.45, 13.5)):
    cluster = Cluster(_a100_40gb(), 8, 1)
    engine = Engine(tp=float(tp), prefix_caching=False)
    job = _ft_job(512.0)

    def dec(eff, engine=engine, cluster=cluster, job=job):
      c, m, x = gen_lib.decode_round(_GPT13B, job, engine, cluster, eff, jnp.ones(()),
                                     jnp.asarray(517.0))
      return (c + m + x) * 1e3

    def pf(eff, engine=engine, cluster=cluster, job=job):
      pr, comm = gen_lib.prefill(_GPT13B, job, engine, cluster, eff, jnp.asarray(512.0),
                                 jnp.asarray(512.0))
      return (pr.time_s + comm) * 1e3

    cases.append(Case(f"training_inference:{rid_pf}", "decode",
                      f"FasterTransformer GPT-13B prefill 512 tok, TP{tp} (A100-40GB)", pf_ms,
                      "ms", pf))
    cases.append(Case(f"training_inference:{rid_dec}", "decode",
                      f"FasterTransformer GPT-13B decode batch 1, TP{tp} (A100-40GB)", dec_ms,
                      "ms/token", dec))
  # vLLM v0.5.4 serving benchmark, Mistral-7B-Instruct-v0.3 BF16, one GPU: the
  # running batch follows from Little's law (output tokens/s x inter-token
  # latency); the decode step at that batch is predicted.
  for rid, hw_name, tput, itl_ms in ((57, "H100", 3281.19, 27.23),
                                     (58, "A100-80GB", 1591.4, 56.51)):
    batch = tput * itl_ms / 1e3
    cluster = Cluster(hw_lib.get(hw_name), 8, 1)
    job = RLJob("grpo", _MISTRAL7B, prompts_per_step=1.0, samples_per_prompt=1.0,
                prompt_len=1000.0, response=ResponseLength.from_mean_max(1000.0, 1000.0, bins=1))

    def itl(eff, cluster=cluster, job=job, batch=batch):
      c, m, x = gen_lib.decode_round(_MISTRAL7B, job, Engine(), cluster, eff,
                                     jnp.asarray(batch), jnp.asarray(1500.0))
      # In steady state each step also prefills `batch` prompt tokens (one
      # 1,000-token prompt per 1,000 output tokens), interleaved by vLLM.
      pr, comm = gen_lib.prefill(_MISTRAL7B, job, Engine(), cluster, eff, jnp.asarray(batch),
                                 jnp.asarray(1000.0))
      over = gen_lib.step_overhead_s(_MISTRAL7B, Engine(), cluster, eff, jnp.asarray(batch))
      return (c + m + x + pr.time_s + comm + over) / (1.0 - API_SERVER_SHARE) * 1e3

    cases.append(Case(f"training_inference:{rid}", "decode",
                      f"vLLM Mistral-7B inter-token latency at batch {batch:.0f} ({hw_name})",
                      itl_ms, "ms", itl,
                      "batch from Little's law; 1,000 + 1,000-token requests assumed (the "
                      "benchmark does not restate its lengths); prefills amortised per step; "
                      "the engine's per-step and per-sequence overheads included, and the "
                      "HTTP server's share of the time (API_SERVER_SHARE)"))
  return cases


def collective_cases() -> list[Case]:
  """NCCL rows. They set the presets' link efficiencies, so they check the
  formulas' shape (latency vs bandwidth terms), not independent accuracy."""
  mib64 = 64.0 * 2**20
  cases = []
  for rid, name, pub in ((85, "H100", 0.322), (86, "A100-80GB", 0.675)):
    def t(eff, name=name):
      return collectives.collective_time("all_reduce", mib64, 8.0, 8.0, hw_lib.get(name),
                                         eff) * 1e3
    cases.append(Case(f"training_inference:{rid}", "collective",
                      f"all-reduce 64 MiB, 8x {name}", pub, "ms", t,
                      "link efficiency of the preset set from NCCL busbw reports"))

  def inter(eff):
    # 3 nodes x 8 A100-40GB with 4x HDR 200 Gb/s per node: 12.5 GB/s per GPU.
    hw = _a100_40gb().replace(scaleout_bandwidth_bytes_per_s=12.5e9)
    size = 4.0 * 2**30
    t = collectives.collective_time("all_reduce", size, 24.0, 8.0, hw, eff)
    return size / t * 2.0 * 23.0 / 24.0 / 1e9

  cases.append(Case("training_inference:90", "collective",
                    "all-reduce busbw, 3 nodes x 8 A100 (4x HDR/node)", 84.8, "GB/s", inter,
                    "nccl-tests reports busbw of the whole all-reduce; 4 GiB message"))
  return cases


SKIPPED = {
    "training_inference:29": "MT-NLG 530B MFU: parallel configuration not published",
    "training_inference:38": "LLaMA-65B tokens/s: parallel configuration not published",
    "training_inference:87": "NVLS all-reduce: a separate algorithm, not modelled",
    "training_inference:88": "H200 NVLS peak busbw: a separate algorithm, not modelled",
    "training_inference:89": "per-NIC busbw defines the preset's scale-out efficiency",
    "training_inference:91": "A100 busbw ~200 GB/s defines the preset's scale-up efficiency",
}


def all_cases() -> list[Case]:
  """Every non-RL case (the RL rows live in :mod:`rl_cases`)."""
  return training_cases() + memory_cases() + kernel_cases() + decode_cases() + \
      collective_cases()
