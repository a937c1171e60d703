"""Efficiency parameters of the cost model and the smooth efficiency curves.

The parameters are the model's knobs: what calibration fits and what a user may
override. Every field is a pytree leaf.

Efficiency rises smoothly with the size of an operation:

    eff(x) = eff_max / (1 + (x_half / x) ** k)

For a GEMM, ``x`` is its number of rows M (tokens): transformer projections
have N, K >= 1,536, and what starves the tensor cores is a short M (few tiles,
skinny shapes). Vidur's H100 MLP profiles (63% of peak at 256 tokens, 69-74%
at 4,096) give ``M_half ~ 48`` with k = 1; large-M efficiency is the
accelerator's ``matmul_efficiency_max``. For HBM transfers ``x`` is the ideal
time (bytes / bandwidth): Calculon's memory curve (60% at 1 MB, 75% at 10 MB,
90% above 100 MB at ~2 TB/s) gives ``t_half ~ 0.5 us``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel._src import pytree
from costmodel._src.ops import smooth

# GEMM width curve (see gemm_efficiency): a grid fit on DeepGEMM's H800 FP8
# rows (deepseek-ai/DeepGEMM README.md @55ab91f), where narrow N or K run at
# 50-80% of the wide shapes, jointly with the Megatron-Core MoE recipe rows
# (hidden 2,048-4,096, expert widths 768-1,536), holding the dense training
# and BF16 kernel rows; mapped to BF16 by the peak ratio.
MATMUL_HALF_WIDTH = 320.0
MATMUL_WIDTH_EXPONENT = 1.5
# GEMM operand stream (see stream_efficiency): fitted on the memory-bandwidth
# column of DeepGEMM's dense FP8 rows at M = 64 and 128 (deepseek-ai/DeepGEMM
# README.md @55ab91f: 1,688 and 1,509 GB/s at N = 2,112, 2,320 and 2,221 at
# N = 4,096, 2,277-2,668 at N = 7,168, on H800's 3.35 TB/s).
MATMUL_STREAM_HALF_BYTES = 1700.0
MATMUL_STREAM_EXPONENT = 2.0


@pytree.pytree_dataclass
class Efficiency:
  """Calibratable efficiency parameters.

  Attributes:
    matmul_half_rows: GEMM rows (tokens) at which efficiency is half its max:
      wave and tile quantisation of short GEMMs. 48: Vidur's H100 MLP
      profiles (microsoft/vidur ``data/profiling/compute`` @7d47513: 63% of
      peak at 256 tokens, 69-74% at 4,096).
    matmul_exponent: Steepness of the GEMM row curve (1, the same fit).
    attention_efficiency: Attention-core efficiency relative to GEMMs: the
      softmax and its rescaling between the two GEMMs of a FlashAttention
      tile. 0.7: FlashAttention-2 reaches 50-73% of the A100's peak in the
      forward pass (Dao, arXiv:2307.08691) where GEMMs reach 80-90%.
    memory_half_time_s: Ideal transfer time at which HBM efficiency is half:
      launch and latency of short transfers. 0.5 us: Calculon's memory
      curve (60% at 1 MB, 75% at 10 MB, 90% above 100 MB; calculon-ai/calculon
      system files).
    memory_exponent: Steepness of the HBM efficiency curve (the same fit).
    link_efficiency: Multiplier on the accelerator's measured link
      efficiencies (``Hardware.scaleup_efficiency`` and ``scaleout_efficiency``,
      set from nccl-tests bus bandwidths: NVIDIA/nccl-tests issues #119,
      #149, #290 and Vidur's all-reduce profiles). 1: the presets as measured.
    host_efficiency: Achieved fraction of host-link bandwidth for offload:
      pinned host-device copies. 0.8: cuda-samples' ``bandwidthTest`` pinned
      copies reach about 80% of a PCIe link's rate.
    dp_overlap: Fraction of data-parallel gradient traffic hidden behind the
      backward pass: bucketed gradient reduction launched as the backward
      frees each bucket (Li et al., PyTorch Distributed, VLDB 2020; Megatron's
      ``overlap_grad_reduce``). 0.7, fitted on the Megatron-LM and Korthikanti
      et al. training rows (``published_training_inference.csv`` 1-10, 21-28).
    decode_step_overhead_s: Engine overhead per decode step (scheduler, input
      preparation, Python), per engine, whatever the batch. 1.5 ms: vLLM's
      CPU time per step at small batch (vLLM blog 2024-09-05), held by the
      vLLM serving rows (``published_training_inference.csv`` 57-58).
    decode_seq_overhead_s: Engine overhead per running sequence per decode
      step (sampling, detokenisation, stop checks, block tables). 20 us: vLLM
      0.5's scheduling took 29% of a Llama-3-8B step on one H100 against 38%
      on the GPU (vLLM blog 2024-09-05), i.e. ~10 ms at a ~100-300 sequence
      batch; V1's persistent batch cuts it several-fold.
    decode_rank_overhead_s: Per-step cost of each GPU beyond the first in an
      engine (the step's inputs broadcast to every TP/PP worker, their
      barrier). 50 us: one shared-memory or NCCL broadcast of the scheduler
      output per worker.
    eager_layer_overhead_s: Per-layer cost of a decode step in eager mode
      (``Engine.cuda_graphs=False``): ~15 kernel launches of ~7 us plus the
      Python module calls, 0.1 ms.
    cross_node_step_overhead_s: Per-step cost of an engine whose TP x PP
      group spans scale-up domains: the scheduler output travels to remote
      workers by RPC (vLLM's Ray executor) and the per-layer all-reduces
      leave NVLink. 5 ms (a Ray task round trip is milliseconds).
    generate_overhead_s: Fixed overhead per generation stage: the controller
      submits the step's requests to every engine and collects and
      detokenises the outputs (veRL's ``generate_sequences``). 1 s, an upper
      bound: veRL's untimed rest of rl:3 and rl:5 (10.7-10.9 s) holds it with
      the reward.
    infer_overhead_s: Fixed overhead per inference stage: one remote call
      into every worker of the pool and the barrier that collects them (veRL's
      ``RayWorkerGroup`` dispatch and collect, ``verl/single_controller``).
      0.5 s, within the same bound.
    train_overhead_s: Fixed overhead per optimizer update (mini-batch): the
      gradient-norm all-reduce and clipping, the scheduler step and the
      mini-batch's metric reductions (veRL ``dp_actor.update_policy``). 0.05 s,
      a few collectives and kernel launches.
    train_call_overhead_s: Fixed overhead per call into the trainer (one per
      training stage, or one per ``Mode.require_batches`` mini-batches when
      streaming): a remote call to every worker, the batch split and
      balanced, FSDP's state re-gathered, metrics reduced. 7.2 s, fitted on
      veRL's fully-async ablation (``published_rl_more.csv`` N5-N7: the same
      512-prompt step in 16, 8 and 4 trainer calls takes 181.1, 128.1 and
      95.1 s of ``update_actor``, 7.2 s per extra call).
    sync_overhead_s: Fixed overhead per weight sync (the RPCs that start it and
      the engine's barrier; 0.05 s: veRL's checkpoint engine syncs a 7B model
      inside one node in 0.02 s, all costs included).
    sync_per_tensor_s: Weight-sync overhead per tensor with the ``per_tensor``
      backend (one NCCL broadcast or ``load_weights`` call per tensor, dtype and
      layout conversion). 0.5 ms, fitted on veRL's per-tensor sync rows
      (``published_rl.csv`` rl:12, rl:13: 15.8 s for Qwen3-30B-A3B, 58.6 s
      for Qwen3-235B-A22B).
    sync_export_bytes_per_s: Rate at which a trainer exports full tensors for
      a full-tensor sync (``per_tensor``, ``bucketed`` backends, not
      colocated): gathering TP/EP shards into the engine's names and layout,
      per PP stage. 30 GB/s: veRL's README attributes most of the sync time
      to this phase; its checkpoint-engine rows (61 GB in 4.4 s, 470 GB in
      23.7 s on H20) put the whole sync at 14-20 GB/s, of which the 46 GB/s
      NIC broadcast is the lesser part.
    sync_bucket_bytes: Bucket size of the ``bucketed`` and ``ipc`` backends
      (NeMo-RL's refit and veRL's checkpoint engine default to 4,096 MiB).
    sync_per_bucket_s: Cost per bucket (pack, launch, unpack into the
      engine's fused parameters). 20 ms, fitted on veRL's bucketed rows
      (rl:12, rl:13) and NeMo-RL's refit rows (``published_rl_more.csv``
      N15-N18).
    batch_transfer_bytes_per_token: Bytes per padded token of the batch that
      moves between roles at each stage boundary (veRL's ``DataProto`` pads
      every response to the maximum length and carries token ids, attention
      mask and position ids as int64: 24-32 bytes per token).
    batch_transfer_bytes_per_s: Throughput of that hand-off through the
      single controller: the driver serialises the batch
      (``DataProto.__getstate__``: ``consolidate``, then ``torch.save`` into a
      buffer; ``verl/protocol.py`` @b178a3c), puts it in the Ray object store
      and every worker gets and deserialises its chunk, several copies of
      the batch in one process. 1 GB/s, within veRL's untimed rest of rl:3
      and rl:5.
    controller_return_bytes_per_s: Rate at which a single controller takes
      back the per-token outputs of a log-prob pass, padded to
      ``[samples, max response]`` (:func:`infer.returned_outputs_s`): veRL's
      driver deserialises every worker's ``old_log_probs`` and ``entropys``
      (fp32), concatenates them, unions them into the batch and reduces them
      on its CPU under the ``old_log_prob`` timer (the entropy aggregate and,
      with rollout log-probs, the rollout-versus-actor metrics;
      ``verl/trainer/ppo/ray_trainer.py`` @b178a3c). 58 MB/s (about twenty
      single-threaded passes over the fp32 elements), fitted on the part of
      veRL's ``old_log_prob`` rows rl:1/3/5 that does not shrink with the GPU
      count (33 s of 108 s on 32 H20 for 8,192 x 28,672 padded response
      tokens); the update returns metrics only.
    switch_overhead_s: Fixed cost of one train <-> generate switch on a shared
      pool: the engine's sleep and wake-up (vLLM's sleep mode frees and
      re-maps the weights' and KV cache's memory, CuMemAllocator) and the
      trainer's offload calls. 1 s, part of veRL's colocated ``gen`` timer.
    train_efficiency: Multiplier on training-stage compute efficiency
      (framework overhead: FSDP, dynamic batching, padding). 1: none; the
      RL-specific costs are modelled as their own terms.
    cpu_optimizer_params_per_s: Parameters per second one GPU's host process
      updates with an offloaded (CPU) Adam: DeepSpeed's vectorised CPU-Adam
      (Ren et al., ZeRO-Offload, ATC'21) on the cores of one GPU's share of a
      host. 1e9, the order of its published step rates.
    matmul_tile_rows: Rows a GEMM with very few rows is padded to (the
      smallest M tile of decode-time GEMM and fused-MoE kernels: 16 in
      Triton fused-MoE and DeepGEMM's masked layout); see
      :func:`gemm_efficiency`. Equal to ``matmul_half_rows`` gives the plain
      row curve.
    matmul_half_width: GEMM width (N or K) at which that dimension halves the
      efficiency; see :func:`gemm_efficiency`.
    matmul_width_exponent: Steepness of the width factor.
    fp8_matmul_efficiency: Best FP8 GEMM efficiency relative to the BF16 one
      (``matmul_efficiency_max``), applied to the FP8 peak. 0.95: DeepGEMM's
      compute-bound FP8 rows (deepseek-ai/DeepGEMM README @55ab91f).
    fp4_matmul_efficiency: Likewise for FP4 GEMMs on the FP4 peak. 0.85: no
      public FP4 row is validated; set below the FP8 value for the block
      scales' extra operands.
    moe_imbalance: Tokens of the busiest expert rank over the mean (routing
      skew or capacity factor, >= 1): expert GEMMs and the expert all-to-all
      run at the pace of that rank. 1 is balanced routing, what the public
      MoE benchmarks force (Megatron's ``--moe-router-force-load-balancing``);
      a dropless router with an auxiliary loss runs above it.
    moe_layer_overhead_s: Fixed time per MoE layer per training or inference
      pass (router, top-k, token sort, dispatcher bookkeeping and launches);
      fitted on the Megatron-Core MoE recipe rows of the validation set.
    convert_per_tensor_s: Weight-sync cost per tensor of a format conversion
      (BF16 trainer to FP8 engine: block scales, quantisation kernels).
      0.12 ms: a few kernel launches and a small reduction per tensor; no
      public row isolates it (NeMo-RL's FP8 refit, N17, is left out).
    matmul_stream_half_bytes: Output width of a GEMM, in bytes of its input
      format (N x bytes per element), at which its operand stream reaches
      half the HBM efficiency of a wide one; see :func:`stream_efficiency`.
      1,700 B: DeepGEMM's memory-bound FP8 GEMMs (M <= 128) stream 1.5-1.7
      TB/s at N = 2,112 against 2.3-2.7 TB/s at N >= 4,096 on H800.
  """

  matmul_half_rows: jax.Array | float = 48.0
  matmul_exponent: jax.Array | float = 1.0
  attention_efficiency: jax.Array | float = 0.7
  memory_half_time_s: jax.Array | float = 0.5e-6
  memory_exponent: jax.Array | float = 0.8
  link_efficiency: jax.Array | float = 1.0
  host_efficiency: jax.Array | float = 0.80
  dp_overlap: jax.Array | float = 0.7
  decode_step_overhead_s: jax.Array | float = 1.5e-3
  decode_seq_overhead_s: jax.Array | float = 20e-6
  decode_rank_overhead_s: jax.Array | float = 50e-6
  eager_layer_overhead_s: jax.Array | float = 0.1e-3
  cross_node_step_overhead_s: jax.Array | float = 5e-3
  generate_overhead_s: jax.Array | float = 1.0
  infer_overhead_s: jax.Array | float = 0.5
  train_overhead_s: jax.Array | float = 0.05
  train_call_overhead_s: jax.Array | float = 7.2
  sync_overhead_s: jax.Array | float = 0.05
  sync_per_tensor_s: jax.Array | float = 0.5e-3
  sync_bucket_bytes: jax.Array | float = 4096.0 * 2**20
  sync_export_bytes_per_s: jax.Array | float = 30e9
  sync_per_bucket_s: jax.Array | float = 20e-3
  batch_transfer_bytes_per_token: jax.Array | float = 32.0
  batch_transfer_bytes_per_s: jax.Array | float = 1e9
  controller_return_bytes_per_s: jax.Array | float = 58e6
  switch_overhead_s: jax.Array | float = 1.0
  train_efficiency: jax.Array | float = 1.0
  cpu_optimizer_params_per_s: jax.Array | float = 1e9
  # ----- GEMM shape, MoE routing and low precision --------------------------
  matmul_tile_rows: jax.Array | float = 16.0
  matmul_half_width: jax.Array | float = MATMUL_HALF_WIDTH
  matmul_width_exponent: jax.Array | float = MATMUL_WIDTH_EXPONENT
  fp8_matmul_efficiency: jax.Array | float = 0.95
  fp4_matmul_efficiency: jax.Array | float = 0.85
  moe_imbalance: jax.Array | float = 1.0
  moe_layer_overhead_s: jax.Array | float = 1.5e-3
  convert_per_tensor_s: jax.Array | float = 1.2e-4
  matmul_stream_half_bytes: jax.Array | float = MATMUL_STREAM_HALF_BYTES

  def __post_init__(self):
    pytree.check_positive(
        "Efficiency", matmul_half_rows=self.matmul_half_rows,
        matmul_exponent=self.matmul_exponent,
        memory_half_time_s=self.memory_half_time_s,
        memory_exponent=self.memory_exponent,
        cpu_optimizer_params_per_s=self.cpu_optimizer_params_per_s,
        sync_bucket_bytes=self.sync_bucket_bytes,
        sync_export_bytes_per_s=self.sync_export_bytes_per_s,
        batch_transfer_bytes_per_s=self.batch_transfer_bytes_per_s,
        controller_return_bytes_per_s=self.controller_return_bytes_per_s,
        matmul_half_width=self.matmul_half_width,
        matmul_tile_rows=self.matmul_tile_rows,
        matmul_width_exponent=self.matmul_width_exponent,
        matmul_stream_half_bytes=self.matmul_stream_half_bytes)
    pytree.check_fraction(
        "Efficiency", attention_efficiency=self.attention_efficiency,
        link_efficiency=self.link_efficiency,
        host_efficiency=self.host_efficiency,
        train_efficiency=self.train_efficiency,
        fp8_matmul_efficiency=self.fp8_matmul_efficiency,
        fp4_matmul_efficiency=self.fp4_matmul_efficiency)
    pytree.check_nonnegative(
        "Efficiency", decode_step_overhead_s=self.decode_step_overhead_s,
        decode_seq_overhead_s=self.decode_seq_overhead_s,
        decode_rank_overhead_s=self.decode_rank_overhead_s,
        eager_layer_overhead_s=self.eager_layer_overhead_s,
        cross_node_step_overhead_s=self.cross_node_step_overhead_s,
        sync_per_bucket_s=self.sync_per_bucket_s,
        batch_transfer_bytes_per_token=self.batch_transfer_bytes_per_token,
        generate_overhead_s=self.generate_overhead_s,
        infer_overhead_s=self.infer_overhead_s,
        train_overhead_s=self.train_overhead_s,
        train_call_overhead_s=self.train_call_overhead_s,
        sync_overhead_s=self.sync_overhead_s,
        sync_per_tensor_s=self.sync_per_tensor_s,
        switch_overhead_s=self.switch_overhead_s,
        convert_per_tensor_s=self.convert_per_tensor_s,
        moe_layer_overhead_s=self.moe_layer_overhead_s)
    pytree.check_at_least("Efficiency", 1, moe_imbalance=self.moe_imbalance)
    pytree.check_share("Efficiency", dp_overlap=self.dp_overlap)


def saturating_efficiency(size: jax.Array, eff_max: jax.Array,
                          half_size: jax.Array, exponent: jax.Array) -> jax.Array:
  """``eff_max / (1 + (half_size / size) ** exponent)``.

  Smooth and increasing in the operation's size; tends to ``eff_max`` for
  large operations and to 0 for tiny ones. Finite gradients at 0.
  """
  ratio = jnp.exp(exponent * (smooth.safe_log(half_size) - smooth.safe_log(size)))
  return eff_max / (1.0 + ratio)


# ----- GEMM efficiency by shape ---------------------------------------------


def gemm_efficiency(rows, eff_max, eff: Efficiency, n=None, k=None, speedup=1.0) -> jax.Array:
  """Fraction of peak a GEMM of ``rows`` x ``n`` x ``k`` reaches.

      eff = eff_max * s(M; P(M)) * s(N; W_half r) * s(K; W_half r)
      s(x; h) = 1 / (1 + (h / x) ** p)
      P(M) = T + (H - T) * M / (M + T),   H = M_half r,  T = tile rows

  The row curve pads a short M: towards the large-M half point ``H`` (wave
  and tile quantisation of big GEMMs), towards the small tile ``T`` of
  decode kernels when M is a handful of rows (a grouped expert GEMM in
  decode sees one or two tokens per expert).

  A short M leaves tiles idle; a narrow N leaves the activation tile little
  reuse; a short K gives each output tile few MMA steps to amortise its
  prologue and epilogue. ``r`` (``speedup``) is the format's peak over the
  BF16 peak: fixed per-tile costs weigh ``r`` times more when the MMAs run
  ``r`` times faster, so FP8 reaches its plateau at twice the sizes (as
  DeepGEMM's masked-layout rows at 256-1,024 rows per expert show). ``n`` or
  ``k`` left out (None) means wide (factor 1). One smooth function for the
  exact and the relaxed model, used by every GEMM, dense or grouped (an
  expert's GEMM is evaluated at the rows that expert receives).

  Args:
    rows: M (tokens of the GEMM, or of one expert).
    eff_max: The accelerator's best fraction for wide GEMMs.
    eff: Efficiency parameters (half sizes and exponents).
    n, k: Output width and reduction depth.
    speedup: Peak of the GEMM's format over the BF16 peak.

  References: NVIDIA, "Matrix Multiplication Background" (tile and wave
  quantisation); DeepGEMM README performance tables.
  """
  half = eff.matmul_half_rows * speedup
  rows = jnp.asarray(rows, float)
  tile = eff.matmul_tile_rows
  pad = tile + (half - tile) * rows / (rows + tile)
  e = saturating_efficiency(rows, eff_max, pad, eff.matmul_exponent)
  for width in (n, k):
    if width is not None:
      e = saturating_efficiency(width, e, eff.matmul_half_width * speedup,
                                eff.matmul_width_exponent)
  return e


def stream_efficiency(width_bytes, eff_mem, eff: Efficiency) -> jax.Array:
  """HBM efficiency of a GEMM's operand stream at output width ``width_bytes``.

      eff = eff_mem / (1 + (W_half / (N b)) ** 2)

  A GEMM without split-K covers its N output columns with tiles, each
  holding ``stages x K-tile`` elements of its weight columns in flight; the
  bytes in flight over the whole GPU are ``N b x stages x K-tile`` (``b``
  bytes per input element), and by Little's law the stream runs at most at
  those bytes over the HBM latency. A memory-bound GEMM with a short M
  (decode, small-batch projections) and a narrow N therefore streams below
  the HBM plateau, and an FP8 GEMM (``b = 1``) of the same N holds half the
  bytes in flight of a BF16 one: DeepGEMM's FP8 kernels at M <= 128 reach
  1.5-1.7 TB/s at N = 2,112. DeepGEMM keeps 128 x 8 = 1,024 elements of K
  in flight per column, so at ``W_half`` = 1,700 B it holds 1.7 MB in
  flight, which drains at the H800 plateau (2.9 TB/s) in 0.6 us, an HBM
  latency of the usual order.
  Compute-bound GEMMs are untouched (the roofline takes the larger time).

  Args:
    width_bytes: ``N x b``, the output width in bytes of the input format.
    eff_mem: HBM efficiency of the transfer ignoring its width.
    eff: Efficiency parameters (``matmul_stream_half_bytes``).

  References: Little's law; DeepGEMM ``deep_gemm/jit_kernels/gemm.py``
  @55ab91f (block K 128, up to 8 pipeline stages); README dense GEMM table.
  """
  return saturating_efficiency(width_bytes, eff_mem, eff.matmul_stream_half_bytes,
                               MATMUL_STREAM_EXPONENT)
