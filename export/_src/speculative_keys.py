"""Speculative decoding (``Engine.speculative``) in the frameworks' own keys.

Only frameworks whose pinned code passes a speculative configuration to its
engine run a draft (:data:`RUNS`); the other exporters refuse it by name
(``common.check_supported``, feature ``speculative``). Written by the
NeMo-RL and slime exporters, read back by their importers:

* NeMo-RL (NVIDIA-NeMo/RL@7ea279ab): vLLM's ``speculative_config`` under
  ``policy.generation.vllm_kwargs``, passed whole to vLLM
  (``nemo_rl/models/generation/vllm/vllm_worker.py:374,596``) and read by
  NeMo-RL itself (``nemo_rl/models/generation/__init__.py:73,77`` its
  ``method``, ``vllm_worker.py:888-889`` its ``num_speculative_tokens``), as in
  ``examples/configs/recipes/llm/grpo-qwen3-1.7b-1n8g-megatron-eagle3.yaml:36-39``
  (``method``, ``model``, ``num_speculative_tokens``);
* slime (THUDM/slime@624b824a): SGLang's server flags with the ``--sglang-``
  prefix (``slime/backends/sglang_utils/arguments.py:96``), as
  ``docs/en/advanced/speculative-decoding.md:10-13,19`` writes them:
  ``--sglang-speculative-algorithm``, ``--sglang-speculative-num-steps``,
  ``--sglang-speculative-eagle-topk 1`` (chain drafting),
  ``--sglang-speculative-num-draft-tokens`` (steps + 1) and
  ``--sglang-speculative-draft-model-path``.

The acceptance rate is no setting (it is a property of the draft and the
data): an import takes it from ``speculative_acceptance=``, else
:data:`DEFAULT_ACCEPTANCE`, and says which on its "not modelled" line.
"""

from __future__ import annotations

from typing import Any

import costmodel as cm

RUNS = ("nemo_rl", "slime")

# The acceptance an import assumes when ``speculative_acceptance=`` is not given: vLLM
# pull request #29334 (mt-bench, Llama-3.1-8B-Instruct, EAGLE head, one draft token)
# reports a mean acceptance length of 1.70 (the row of costmodel/data/
# published_speculative.csv); with k = 1 the length is 1 + alpha, so alpha = 0.70. One
# measured draft on one data set: a user's own acceptance rate replaces it.
DEFAULT_ACCEPTANCE = 1.70 - 1.0

NEMO_RL = "policy.generation.vllm_kwargs.speculative_config"
_VLLM_METHOD = {"mtp": "mtp", "eagle": "eagle3", "draft": "draft_model", "ngram": "ngram"}
# vLLM's names read back (nemo_rl/models/generation/__init__.py:77 takes both MTP names)
_VLLM_KIND = {"mtp": "mtp", "deepseek_mtp": "mtp", "eagle": "eagle", "eagle3": "eagle",
              "draft_model": "draft", "ngram": "ngram"}
# SGLang: EAGLE over the model's own MTP layers (the slime doc's MTP example), EAGLE3 for
# an EAGLE-3 head, STANDALONE for a separate draft model, NGRAM for prompt lookup.
_SGLANG_ALGORITHM = {"mtp": "EAGLE", "eagle": "EAGLE3", "draft": "STANDALONE",
                     "ngram": "NGRAM"}
_SGLANG_KIND = {v: k for k, v in _SGLANG_ALGORITHM.items()}


def framework_keys(framework: str, spec: cm.Speculative) -> dict[str, object]:
  """The settings ``framework`` reads for ``spec`` (its own keys, dotted or flags).

  Raises:
    ValueError: for a framework that cannot run speculative decoding.
  """
  k = int(round(float(spec.draft_tokens)))
  if framework == "nemo_rl":
    out = {f"{NEMO_RL}.method": _VLLM_METHOD[spec.kind],
           f"{NEMO_RL}.num_speculative_tokens": k}
    if spec.kind == "draft":
      out[f"{NEMO_RL}.model"] = spec.draft_model.name
    return out
  if framework == "slime":
    out = {"--sglang-speculative-algorithm": _SGLANG_ALGORITHM[spec.kind],
           "--sglang-speculative-num-steps": k, "--sglang-speculative-eagle-topk": 1,
           "--sglang-speculative-num-draft-tokens": k + 1}
    if spec.kind == "draft":
      out["--sglang-speculative-draft-model-path"] = spec.draft_model.name
    return out
  raise ValueError(f"speculative: framework={framework!r} passes no speculative settings to "
                   f"its engine at its pinned commit; frameworks that do: {', '.join(RUNS)}")


def _spec(fw: str, kind: str, tokens: Any, draft: Any, acceptance: float | None,
          where: str, notes: list[str]) -> cm.Speculative:
  try:
    k = float(tokens)
  except (TypeError, ValueError):
    raise ValueError(f"{fw}: {where} draft tokens={tokens!r} must be an integer >= 1") from None
  model = None
  if kind == "draft":
    if draft is None:
      raise ValueError(f"{fw}: {where} drafts with a separate model but names none")
    model = cm.models.get(str(draft))
  if acceptance is None:
    acceptance = DEFAULT_ACCEPTANCE
    notes.append(f"{where}: speculative acceptance {acceptance:g} per draft token assumed "
                 "(vLLM #29334's EAGLE measurement; no framework setting states it: give "
                 "--speculative_acceptance for this draft and data)")
  else:
    notes.append(f"speculative acceptance {float(acceptance):g} per draft token from "
                 "speculative_acceptance= (not a framework setting)")
  return cm.Speculative(kind, draft_tokens=k, acceptance=float(acceptance), draft_model=model)


def read_nemo_rl(o: dict[str, Any], acceptance: float | None,
                 notes: list[str]) -> cm.Speculative | None:
  """The draft of a NeMo-RL config (flat dotted keys), or None without one."""
  method = o.get(f"{NEMO_RL}.method")
  if method is None:
    return None
  if method not in _VLLM_KIND:
    raise ValueError(f"NeMo-RL: {NEMO_RL}.method={method!r} is not one of "
                     f"{tuple(_VLLM_KIND)}")
  return _spec("NeMo-RL", _VLLM_KIND[method], o.get(f"{NEMO_RL}.num_speculative_tokens"),
               o.get(f"{NEMO_RL}.model"), acceptance, f"{NEMO_RL}.method={method!r}", notes)


def read_slime(o: dict[str, Any], acceptance: float | None,
               notes: list[str]) -> cm.Speculative | None:
  """The draft of a slime command line (flags without ``--``), or None without one."""
  algorithm = o.get("sglang-speculative-algorithm")
  if algorithm is None:
    return None
  if algorithm not in _SGLANG_KIND:
    raise ValueError(f"slime: sglang-speculative-algorithm={algorithm!r} is not one of "
                     f"{tuple(_SGLANG_KIND)}")
  topk = o.get("sglang-speculative-eagle-topk", 1)
  if str(topk) != "1":
    raise ValueError(f"slime: sglang-speculative-eagle-topk={topk!r}: tree drafting is not "
                     "modelled; use 1 (chain drafting)")
  steps, draft = o.get("sglang-speculative-num-steps"), o.get("sglang-speculative-num-draft-tokens")
  if draft is not None and steps is not None and str(draft) != str(int(float(steps)) + 1):
    raise ValueError(f"slime: sglang-speculative-num-draft-tokens={draft!r} with num-steps="
                     f"{steps!r}: chain drafting verifies num-steps + 1 tokens")
  return _spec("slime", _SGLANG_KIND[algorithm], steps,
               o.get("sglang-speculative-draft-model-path"), acceptance,
               f"sglang-speculative-algorithm={algorithm!r}", notes)
