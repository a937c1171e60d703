"""Rollout engines the cost model has no layout of its own for, read as the nearest one.

Each reader returns the modelled engine's degrees and appends, to the import's
"not modelled" line, what the approximation leaves out.

* vLLM's expert parallelism across data-parallel ranks (``data_parallel_size``
  D, ``tensor_parallel_size`` T, ``expert_parallel_size`` E = D x T > T: the
  MoE layers' experts shard over all E GPUs with all-to-all while each DP rank
  runs its own attention, vLLM's ``enable_expert_parallel``). With T = 1 that
  is one engine of E GPUs with data-parallel attention (``Engine.dp_attention``:
  whole attention heads and their KV on each GPU, experts over all E GPUs).
  With T > 1 each DP rank's attention is split T ways, which no modelled
  engine states (data-parallel attention keeps it whole on each GPU): refused.
"""

from __future__ import annotations


def expert_data_parallel(fw: str, tp_key: str, tp: int, dp_key: str, dp: int, ep_key: str,
                         ep: int, notes: list[str]) -> tuple[int, int, bool]:
  """``(tp, ep, dp_attention)`` of the modelled engine for vLLM's T, D and E.

  E = 1 or E = T is the engine as stated (D engines of T GPUs are the plan's
  replicas); E = D > T = 1 is one engine of E GPUs with data-parallel attention.

  Raises:
    ValueError: for another E, or E = D x T with T > 1.
  """
  if ep in (1, tp):
    return tp, ep, False
  if ep != dp * tp:
    raise ValueError(f"{fw}: {ep_key}={ep} with {tp_key}={tp} and {dp_key}={dp}: vLLM's "
                     f"expert parallelism spans {dp_key} x {tp_key} = {dp * tp} GPUs")
  if tp > 1:
    raise ValueError(f"{fw}: {ep_key}={ep} over {dp_key}={dp} x {tp_key}={tp}: vLLM's "
                     f"experts across DP ranks whose attention is split {tp} ways has no "
                     "engine layout in the cost model (its data-parallel attention keeps "
                     "attention whole on each GPU: tensor parallelism 1)")
  notes.append(f"{ep_key}={ep} over {dp_key}={dp}: costed as one engine of {ep} GPUs with "
               "data-parallel attention")
  return ep, ep, True
