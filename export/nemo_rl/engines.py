"""NeMo-RL's generation backends (``policy.generation.backend``) as rollout engines.

At NVIDIA-NeMo/RL@7ea279a (``nemo_rl/algorithms/grpo.py`` setup):

* ``vllm``: ``vllm_cfg`` (degrees, memory, precision) and ``vllm_kwargs``;
* ``sglang``: ``sglang_cfg`` (SGLang's server arguments by name);
* ``dynamo``: vLLM workers behind Dynamo's frontend, configured from the same
  ``vllm_cfg`` (``nemo_rl/models/generation/dynamo/arguments.py``); the
  frontend and its KV-aware router are not modelled;
* ``trtllm``: TensorRT-LLM (``trtllm_cfg``: ``tensor_parallel_size``,
  ``max_batch_size``, ``gpu_memory_utilization`` passed as
  ``free_gpu_memory_fraction``, a share of the memory left after the weights);
  costed as a vLLM-style engine of the same degrees, its share of the free
  memory taken as a share of all memory (both noted);
* ``megatron``: Megatron-Core's inference engine inside the policy's workers,
  with the policy's TP, PP and EP and a KV buffer of
  ``mcore_generation_config.buffer_size_gb``; costed as an engine of the
  policy's degrees whose memory holds the policy's weight shard and that
  buffer. Colocated it needs no refit (the weights are the policy's own),
  costed as CUDA IPC, the cheapest modelled sync (noted).

Weights reach a vLLM engine by CUDA IPC when colocated (``ipc``), else by
packed NCCL broadcasts (``bucketed``) or ``refit_transport: nccl_reshard``
(``reshard``); ``nixl`` (NIXL checkpoint engine, full buckets over RDMA) and
the sparse delta transports are costed as ``bucketed`` and noted.
"""

from __future__ import annotations

import dataclasses

import costmodel as cm
from export._src import engine_kinds
from export._src import importing
from export._src.importing import flag
from export._src.importing import number

FW = "NeMo-RL"
G = "policy.generation"
_BACKENDS = ("vllm", "sglang", "dynamo", "trtllm", "megatron")
# refit_transport values costed as bucketed broadcasts (vllm/config.py VllmRefitSelector)
_APPROXIMATE_SYNC = {"nixl": "NIXL's RDMA buckets", "vllm_zmq_sparse": "a sparse weight delta",
                     "vllm_s3_sparse": "a sparse weight delta"}


def read(o: dict, g: importing.Given, model: cm.ModelSpec, policy: cm.Parallel, colocated: bool,
         notes: list[str]) -> cm.Engine:
  """The rollout engine of a NeMo-RL config (flat dotted keys), its sync included.

  Raises:
    ValueError: naming the key for a backend or setting with no engine in the cost model.
  """
  backend = o.get(f"{G}.backend", "vllm")
  if backend not in _BACKENDS:
    raise ValueError(f"{FW}: {G}.backend={backend!r} is not one of {list(_BACKENDS)}")
  _other_sections_unused(o, backend)
  if backend == "megatron":
    return _megatron(o, g, model, policy, colocated, notes)
  if backend == "dynamo":
    engine = o.get(f"{G}.dynamo_cfg.engine", "vllm")
    if engine != "vllm":
      raise ValueError(f"{FW}: {G}.dynamo_cfg.engine={engine!r}: only Dynamo's vLLM workers "
                       "are read (from vllm_cfg)")
    notes.append(f"{G}.backend='dynamo': costed as its vLLM workers (vllm_cfg); Dynamo's "
                 "frontend and KV-aware router not modelled")
  read_engine = {"vllm": _vllm, "dynamo": _vllm, "sglang": _sglang, "trtllm": _trtllm}[backend]
  return read_engine(o, g, notes).replace(sync_backend=_sync(o, colocated, notes))


# The section each backend reads; the base configs carry the others' defaults too.
_SECTIONS = {"vllm": ("vllm_cfg", "vllm_kwargs"), "dynamo": ("vllm_cfg", "vllm_kwargs"),
             "sglang": ("sglang_cfg",), "trtllm": ("trtllm_cfg", "trtllm_kwargs"),
             "megatron": ("mcore_generation_config",)}


def _other_sections_unused(o: dict, backend: str) -> None:
  """Marks the sections of the backends not chosen as read: no setting of this run."""
  mine = tuple(f"{G}.{s}." for s in _SECTIONS[backend])
  others = tuple(f"{G}.{s}." for b in _SECTIONS for s in _SECTIONS[b] if b != backend)
  for k in list(o):
    if k.startswith(others) and not k.startswith(mine):
      o.get(k)


def _sync(o: dict, colocated: bool, notes: list[str]) -> str:
  transport = o.get(f"{G}.refit_transport")
  if colocated:
    return "ipc"
  if transport is None:
    return "bucketed"
  if transport == "nccl_reshard":
    return "reshard"
  if transport in _APPROXIMATE_SYNC:
    notes.append(f"{G}.refit_transport={transport!r}: {_APPROXIMATE_SYNC[transport]} costed as "
                 "NCCL broadcasts of full-tensor buckets (bucketed)")
    return "bucketed"
  raise ValueError(f"{FW}: {G}.refit_transport={transport!r} is not one of "
                   f"{[None, 'nccl_reshard', *_APPROXIMATE_SYNC]}")


def _vllm(o: dict, g: importing.Given, notes: list[str]) -> cm.Engine:
  v = f"{G}.vllm_cfg"
  tp = number(o, f"{v}.tensor_parallel_size", FW)
  ep = number(o, f"{v}.expert_parallel_size", FW, 1)
  # vLLM's EP spans DP x TP (grpo_math_1B.yaml's comment on expert_parallel_size)
  tp, ep, wide = engine_kinds.expert_data_parallel(
      FW, f"{v}.tensor_parallel_size", tp, "(expert_parallel_size / tensor_parallel_size)",
      max(1, ep // tp), f"{v}.expert_parallel_size", ep, notes)
  return cm.Engine(
      tp=float(tp), pp=float(number(o, f"{v}.pipeline_parallel_size", FW, 1)), ep=float(ep),
      dp_attention=wide,
      memory_fraction=float(number(o, f"{v}.gpu_memory_utilization", FW, kind=float, minimum=0)),
      max_seqs=float(number(o, f"{G}.vllm_kwargs.max_num_seqs", FW, g.engine_max_seqs)),
      # vllm_worker.py @7ea279a (_resolve_enable_prefix_caching) passes vllm_cfg's key to
      # vLLM; unset, it is on for compute capability >= 8 (every accelerator preset)
      prefix_caching=flag(o, f"{v}.enable_prefix_caching", FW, True),
      cuda_graphs=not flag(o, f"{v}.enforce_eager", FW, False),
      precision=dataclasses.replace(
          _vllm_precision(o), state=state_format(o, f"{G}.vllm_kwargs.mamba_ssm_cache_dtype")))


# mamba_ssm_cache_dtype: auto (the KV cache's format) or a dtype name (vLLM, TensorRT-LLM)
_STATE_DTYPES = {"auto": None, "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def state_format(o: dict, key: str) -> str | None:
  """The recurrent-state format ``mamba_ssm_cache_dtype`` at ``key`` sets (``Precision.state``):
  ``float32`` holds the Mamba SSM state at 4 bytes an element; unset or ``auto``, the KV's."""
  value = o.get(key, "auto")
  if value not in _STATE_DTYPES:
    raise ValueError(f"{FW}: {key}={value!r} is not one of {list(_STATE_DTYPES)}")
  return _STATE_DTYPES[value]


def _vllm_precision(o: dict) -> cm.Precision:
  """``vllm_cfg.precision: fp8`` serves FP8 weights and GEMMs (vllm_worker.py @7ea279a calls
  ``quantization/fp8.py`` ``init_fp8``), with an FP8 KV cache when ``kv_cache_dtype`` is
  ``fp8`` or ``fp8_e4m3`` (which ``init_fp8`` allows only with FP8 weights)."""
  v = f"{G}.vllm_cfg"
  precision = o.get(f"{v}.precision", "bfloat16")
  kv = o.get(f"{v}.kv_cache_dtype", "auto")
  if kv not in ("auto", "fp8", "fp8_e4m3"):
    raise ValueError(f"{FW}: {v}.kv_cache_dtype={kv!r} is not one of auto, fp8, fp8_e4m3")
  if precision == "fp8":
    return cm.Precision(weights="fp8", compute="fp8", kv=None if kv == "auto" else "fp8")
  if precision not in ("bfloat16", "bf16", "float16", "fp16"):
    raise ValueError(f"{FW}: {v}.precision={precision!r} is not bfloat16, float16 or fp8")
  if kv != "auto":
    raise ValueError(f"{FW}: {v}.kv_cache_dtype={kv!r} needs {v}.precision='fp8' (init_fp8)")
  return cm.Precision()


def _sglang(o: dict, g: importing.Given, notes: list[str]) -> cm.Engine:
  """``sglang_cfg`` (SGLang's server arguments by name)."""
  del notes
  c = f"{G}.sglang_cfg"
  return cm.Engine(
      tp=float(number(o, f"{c}.tp_size", FW, 1)), pp=float(number(o, f"{c}.pp_size", FW, 1)),
      ep=float(number(o, f"{c}.ep_size", FW, 1)),
      memory_fraction=float(number(o, f"{c}.mem_fraction_static", FW, kind=float, minimum=0)),
      max_seqs=float(number(o, f"{c}.max_running_requests", FW, g.engine_max_seqs)),
      prefix_caching=not flag(o, f"{c}.disable_radix_cache", FW),
      cuda_graphs=not flag(o, f"{c}.disable_cuda_graph", FW),
      dp_attention=flag(o, f"{c}.enable_dp_attention", FW))


def _trtllm(o: dict, g: importing.Given, notes: list[str]) -> cm.Engine:
  """``trtllm_cfg`` (trtllm_worker_async.py @7ea279a)."""
  del g
  c = f"{G}.trtllm_cfg"
  tp = number(o, f"{c}.tensor_parallel_size", FW, 1)
  moe_ep = o.get(f"{c}.moe_expert_parallel_size")
  ep = 1 if moe_ep is None else number(o, f"{c}.moe_expert_parallel_size", FW)
  if ep not in (1, tp):
    raise ValueError(f"{FW}: {c}.moe_expert_parallel_size={ep} with tensor_parallel_size={tp}: "
                     "the engine's experts shard over its TP GPUs (1 or tensor_parallel_size)")
  fraction = number(o, f"{c}.gpu_memory_utilization", FW, kind=float, minimum=0)
  notes.append(f"{G}.backend='trtllm': costed as a vLLM-style engine of tensor_parallel_size="
               f"{tp} (TensorRT-LLM's kernels not modelled); {c}.gpu_memory_utilization="
               f"{fraction:g} (TensorRT-LLM's share of the memory left after the weights) costed "
               "as a share of all memory")
  state = state_format(o, f"{G}.trtllm_kwargs.kv_cache_config.mamba_ssm_cache_dtype")
  return cm.Engine(tp=float(tp), ep=float(ep), memory_fraction=float(fraction),
                   max_seqs=float(number(o, f"{c}.max_batch_size", FW)),
                   prefix_caching=False, cuda_graphs=True, precision=cm.Precision(state=state))


def _megatron(o: dict, g: importing.Given, model: cm.ModelSpec, policy: cm.Parallel,
              colocated: bool, notes: list[str]) -> cm.Engine:
  """Megatron-Core inference in the policy's workers (``mcore_generation_config``)."""
  m = f"{G}.mcore_generation_config"
  tp, pp, ep = (int(float(policy.tp)), int(float(policy.pp)), int(float(policy.ep)))
  if ep not in (1, tp):
    raise ValueError(f"{FW}: {G}.backend='megatron' with the policy's expert_model_parallel_size="
                     f"{ep} and tensor_model_parallel_size={tp}: the cost model's engine shards "
                     "experts over its TP GPUs only (1 or tp)")
  hbm = float(cm.hardware.get(g.gpu).hbm_bytes)
  buffer = float(number(o, f"{m}.buffer_size_gb", FW, 10, kind=float, minimum=0)) * 2**30
  # the engine's memory: the policy's weight shard (BF16) and the KV buffer
  fraction = min(0.95, (2.0 * float(model.total_params) / (tp * pp) + buffer) / hbm)
  notes.append(f"{G}.backend='megatron': costed as an engine of the policy's tp={tp}, pp={pp}, "
               f"ep={ep} holding its weight shard and {m}.buffer_size_gb of KV (memory fraction "
               f"{fraction:.2f}); Megatron-Core inference's own kernels not modelled"
               + ("; no refit (the policy's own weights) costed as CUDA IPC" if colocated else ""))
  return cm.Engine(tp=float(tp), pp=float(pp), ep=float(ep), memory_fraction=fraction,
                   max_seqs=float(g.engine_max_seqs),
                   prefix_caching=flag(o, f"{m}.enable_prefix_caching", FW, False),
                   cuda_graphs=o.get(f"{m}.cuda_graph_impl", "local") != "none",
                   sync_backend="ipc" if colocated else "bucketed")
