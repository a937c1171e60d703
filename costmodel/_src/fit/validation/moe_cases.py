"""Published MoE and FP8 measurements as prediction cases.

Rows of ``costmodel/data/published_moe_fp8.csv`` (ids ``moe_fp8:N``):

* DeepGEMM's FP8 GEMM tables on H800 (deepseek-ai/DeepGEMM README.md at
  55ab91f72f76e8a6db0e86282c3169a88d93df1b): dense GEMMs of DeepSeek-V3's
  shapes and grouped (MoE) GEMMs in contiguous and masked layouts;
* Megatron-Core MoE recipes (NVIDIA/Megatron-LM ``examples/moe_recipes``,
  configurations at 256f60650736aebd8fa7b943d36bd73544495191; the median
  TFLOP/s/GPU measured in pull requests #5728 and #5289): Qwen3-30B-A3B and
  Qwen3-235B-A22B pre-training in BF16, FP8 (blockwise) and MXFP8 on H100,
  B200 and GB200;
* Pai-Megatron-Patch issue #658: Qwen3-235B-A22B on 256 H800, seconds per
  iteration at three of its four layouts (the fourth recomputes whole MoE
  modules, a mode the model does not have);
* SGLang pull request #7631: DeepSeek-V3 (FP8) decode on one H20 node.

Every benchmark forces balanced routing (``--moe-router-force-load-balancing``),
the default ``Efficiency.moe_imbalance`` of 1. TFLOP/s rows use Megatron's
convention: model FLOPs (forward + backward, causal attention, no
recompute) per GPU per second.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.validation.cases import gemm_rate
from costmodel._src.specs import hardware as hw_lib
from costmodel._src.specs import model_presets as models_lib
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.precision import Precision
from costmodel._src.stages import generate as gen_lib
from costmodel._src.stages import train as train_lib

# DeepGEMM README @55ab91f, "Normal GEMMs for dense models" (H800, FP8 in, BF16 out):
# id, M, N, K, TFLOP/s.
DEEPGEMM_DENSE = (
    (1, 64, 2112, 7168, 206), (2, 64, 24576, 1536, 289), (3, 64, 32768, 512, 219),
    (4, 64, 7168, 16384, 336), (5, 64, 4096, 7168, 287), (6, 64, 7168, 2048, 295),
    (7, 128, 2112, 7168, 352), (8, 128, 24576, 1536, 535), (9, 128, 32768, 512, 358),
    (10, 128, 7168, 16384, 645), (11, 128, 4096, 7168, 533), (12, 128, 7168, 2048, 510),
    (13, 4096, 2112, 7168, 1009), (14, 4096, 24576, 1536, 1125),
    (15, 4096, 32768, 512, 751), (16, 4096, 7168, 16384, 1426),
    (17, 4096, 4096, 7168, 1265), (18, 4096, 7168, 2048, 1168),
)
# Same README, grouped GEMMs (contiguous: 19-22; masked: 23-28):
# id, groups, M per group, N, K, TFLOP/s.
DEEPGEMM_GROUPED = (
    (19, 4, 8192, 4096, 7168, 1346), (20, 4, 8192, 7168, 2048, 1214),
    (21, 8, 4096, 4096, 7168, 1346), (22, 8, 4096, 7168, 2048, 1214),
    (23, 1, 1024, 4096, 7168, 1233), (24, 1, 1024, 7168, 2048, 925),
    (25, 2, 512, 4096, 7168, 1040), (26, 2, 512, 7168, 2048, 916),
    (27, 4, 256, 4096, 7168, 932), (28, 4, 256, 7168, 2048, 815),
)


def _pretrain_job(model, gbs: float, seq: float) -> RLJob:
  return RLJob("grpo", model, prompts_per_step=gbs, samples_per_prompt=1.0, prompt_len=1.0,
               response=ResponseLength.from_mean_max(seq - 1.0, seq - 1.0, bins=1))


def _iteration(model_name, hw_name, gpus, layout: Parallel, gbs, seq, eff, domain=0):
  model = models_lib.get(model_name)
  per_node = 4 if hw_name == "GB200" else 8
  cluster = Cluster(hw_lib.get(hw_name), per_node, max(gpus // per_node, 1),
                    scaleup_domain=domain)
  return train_lib.train(model, _pretrain_job(model, gbs, seq), layout, float(gpus), cluster,
                         eff, global_batch=float(gbs), seq_len=float(seq), updates=1.0).time_s


def _model_tflops(model_name, hw_name, gpus, layout, gbs, seq, eff, domain=0):
  model = models_lib.get(model_name)
  flops = 3.0 * gbs * seq * model.forward_flops_per_token(0.5 * seq)
  return flops / _iteration(model_name, hw_name, gpus, layout, gbs, seq, eff, domain) / gpus / 1e12


FP8 = Precision(compute="fp8")
# Megatron recipes: distributed optimizer (ZeRO-1), SP, grouped GEMMs.
_MCORE = dict(zero_stage=1.0, micro_batch=1.0, recompute=0.0)
# id, label, model, hardware, GPUs, layout, GBS, scale-up domain, TFLOP/s, group.
_RECIPES = (
    (29, "Qwen3-30B-A3B BF16 TP1 PP1 EP8 (Megatron recipe)", "qwen3-30b-a3b", "H100", 32,
     Parallel(ep=8.0, **_MCORE), 256, 0, 240.5, "moe"),
    (30, "Qwen3-30B-A3B FP8 blockwise TP1 PP1 EP8 (Megatron recipe)", "qwen3-30b-a3b", "H100",
     32, Parallel(ep=8.0, precision=FP8, **_MCORE), 256, 0, 242.9, "fp8"),
    (31, "Qwen3-235B-A22B BF16 TP2 PP8 VPP4 EP32, EP overlap (Megatron recipe)",
     "qwen3-235b-a22b", "H100", 256,
     Parallel(tp=2.0, pp=8.0, vpp=4.0, ep=32.0, ep_overlap=1.0, **_MCORE), 2048, 0, 302.0,
     "moe"),
    (32, "Qwen3-30B-A3B BF16 TP1 PP1 EP16, MBS4 (Megatron recipe, GB200)", "qwen3-30b-a3b",
     "GB200", 16, Parallel(ep=16.0, **{**_MCORE, "micro_batch": 4.0}), 512, 72, 504.2, "moe"),
    (33, "Qwen3-30B-A3B MXFP8 TP1 PP1 EP16, MBS4 (Megatron recipe, GB200)", "qwen3-30b-a3b",
     "GB200", 16, Parallel(ep=16.0, precision=FP8, **{**_MCORE, "micro_batch": 4.0}), 512, 72,
     480.3, "fp8"),
    (34, "Qwen3-235B-A22B MXFP8 TP1 PP1 EP64, EP overlap (Megatron recipe, GB200)",
     "qwen3-235b-a22b", "GB200", 128,
     Parallel(ep=64.0, ep_overlap=1.0, precision=FP8, **_MCORE), 8192, 72, 876.2, "fp8"),
    (35, "Qwen3-235B-A22B MXFP8 TP2 PP4 VPP12 EP16, MBS3 (Megatron recipe, B200)",
     "qwen3-235b-a22b", "B200", 128,
     Parallel(tp=2.0, pp=4.0, vpp=12.0, ep=16.0, precision=FP8,
              **{**_MCORE, "micro_batch": 3.0}), 3072, 0, 633.9, "fp8"),
)
# Pai-Megatron-Patch #658 (Qwen3-235B-A22B, 256 H800, seq 4096, forced
# balance, overlapped ZeRO): id, label, tp, micro-batch, recompute, GBS, s/iter.
_PAI = (
    (36, "TP1 EP8 PP32 VPP3, MBS4, full recompute", 1, 4, 2, 4096, 42.537),
    (37, "TP2 EP8 PP32 VPP3, MBS4, full recompute", 2, 4, 2, 4096, 43.495),
    (38, "TP2 EP8 PP32 VPP3, MBS1, MoE-act recompute", 2, 1, 0, 2048, 22.42),
)


def kernel_cases() -> list[Case]:
  """DeepGEMM's FP8 dense (group ``fp8``) and grouped (group ``moe``) GEMMs."""
  h800 = hw_lib.get("H800")
  cases = [Case(f"moe_fp8:{rid}", "fp8", f"DeepGEMM FP8 GEMM {m}x{n}x{k} (H800)", float(pub),
                "TFLOP/s", lambda eff, m=m, n=n, k=k: gemm_rate(h800, m, n, k, eff, "fp8"),
                "M <= 128 rows are memory bound" if m <= 128 else "")
           for rid, m, n, k, pub in DEEPGEMM_DENSE]
  cases += [Case(f"moe_fp8:{rid}", "moe",
                 f"DeepGEMM FP8 grouped GEMM {g}x{m} rows, {n}x{k} (H800)", float(pub),
                 "TFLOP/s",
                 lambda eff, g=g, m=m, n=n, k=k: gemm_rate(h800, m, n, k, eff, "fp8", groups=g))
            for rid, g, m, n, k, pub in DEEPGEMM_GROUPED]
  return cases


def training_cases() -> list[Case]:
  """Megatron-Core MoE recipes and Pai-Megatron-Patch Qwen3-235B runs."""
  cases = []
  for rid, label, model, hw, gpus, layout, gbs, domain, pub, group in _RECIPES:
    cases.append(Case(
        f"moe_fp8:{rid}", group, label, pub, "TFLOP/s/GPU",
        lambda eff, model=model, hw=hw, gpus=gpus, layout=layout, gbs=gbs, domain=domain:
        _model_tflops(model, hw, gpus, layout, gbs, 4096.0, eff, domain),
        "seq 4096; EP overlap read as fully hidden where compute allows; MoE-act and "
        "norm recompute neglected; CUDA graphs not modelled"))
  for rid, label, tp, mb, rc, gbs, pub in _PAI:
    layout = Parallel(tp=float(tp), pp=32.0, vpp=3.0, ep=8.0, micro_batch=float(mb),
                      recompute=float(rc), zero_stage=1.0)
    cases.append(Case(
        f"moe_fp8:{rid}", "moe", f"Qwen3-235B-A22B {label} (256 H800, Pai-Megatron-Patch)",
        pub, "s/iter",
        lambda eff, layout=layout, gbs=gbs: _iteration("qwen3-235b-a22b", "H800", 256, layout,
                                                       float(gbs), 4096.0, eff),
        "BF16; ZeRO-1 with overlapped gradient reduce; no EP overlap"))
  return cases


def decode_cases() -> list[Case]:
  """SGLang serving of DeepSeek-V3 (FP8 weights) on one H20 node, TP8.

  sgl-project/sglang pull request #7631 (with the tuned fused-MoE config):
  ``bench_serving`` random 1,024 / 512 (mean 515 input and 268 output tokens
  drawn), concurrency 7.83, median inter-token latency 19.73 ms. One decode
  step of the running batch at the mean context is predicted, with the
  engine's per-step overhead.
  """
  model = models_lib.get("deepseek-v3")
  cluster = Cluster(hw_lib.get("H20"), 8, 1)
  engine = Engine(tp=8.0, precision=Precision(weights="fp8", compute="fp8"))
  job = RLJob("grpo", model, prompts_per_step=1.0, samples_per_prompt=1.0, prompt_len=515.0,
              response=ResponseLength.from_mean_max(268.0, 268.0, bins=1))

  def itl(eff):
    c, m, x = gen_lib.decode_round(model, job, engine, cluster, eff, jnp.asarray(7.83),
                                   jnp.asarray(515.0 + 134.0))
    return (c + m + x + eff.decode_step_overhead_s) * 1e3

  return [Case("moe_fp8:39", "moe", "SGLang DeepSeek-V3 FP8 TP8 decode step at 8 running "
               "(H20)", 19.73, "ms", itl,
               "median ITL; prefills of arriving requests not amortised (7.8 per ~270 steps)")]


def all_cases() -> list[Case]:
  return kernel_cases() + training_cases() + decode_cases()
