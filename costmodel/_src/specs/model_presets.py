"""Preset architectures and their published parameter counts (data only).

``PRESETS`` maps a preset name to the :class:`ModelSpec` constructor fields of
one model; the comment above each entry names the Hugging Face repository whose
``config.json`` the numbers come from. The Hub itself is not reachable from
here, so each config was checked against stored copies of it (fine-tunes and
quantisations whose ``_name_or_path`` names the repository, or framework model
tables); entries that could not be checked say so.

``PUBLISHED`` holds the total and active parameter counts that the model's
authors or its Hugging Face page state, with the source. Active counts follow
the convention of ``ModelSpec.active_params``: the input embedding and the LM
head count as active. ``rtol`` is 1% except where the published figure is
rounded more coarsely than that; the comment then gives the reason.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from costmodel._src.specs.model import ModelSpec


class Published(NamedTuple):
  """Published parameter counts of one preset."""

  total: float
  active: float
  rtol: float = 0.01


_B = 1e9

PRESETS: dict[str, dict] = {
    # ----- Llama 3.1 (model_type llama) ------------------------------------
    # meta-llama/Llama-3.1-8B
    "llama-3.1-8b": dict(n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8,
                         head_dim=128, ffn_hidden=14336, vocab=128256),
    # meta-llama/Llama-3.1-70B
    "llama-3.1-70b": dict(n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8,
                          head_dim=128, ffn_hidden=28672, vocab=128256),
    # meta-llama/Llama-3.1-405B (8 KV heads; the original mp16 checkpoint
    # duplicates them to 16 for 16-way model parallelism).
    "llama-3.1-405b": dict(n_layers=126, hidden=16384, n_heads=128,
                           n_kv_heads=8, head_dim=128, ffn_hidden=53248,
                           vocab=128256),
    # ----- Llama 2 (model_type llama) --------------------------------------
    # meta-llama/Llama-2-7b-hf
    "llama-2-7b": dict(n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32,
                       head_dim=128, ffn_hidden=11008, vocab=32000),
    # meta-llama/Llama-2-13b-hf
    "llama-2-13b": dict(n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40,
                        head_dim=128, ffn_hidden=13824, vocab=32000),
    # meta-llama/Llama-2-70b-hf
    "llama-2-70b": dict(n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8,
                        head_dim=128, ffn_hidden=28672, vocab=32000),
    # ----- Qwen2.5 (model_type qwen2: biases on q, k, v) -------------------
    # Qwen/Qwen2.5-1.5B
    "qwen2.5-1.5b": dict(n_layers=28, hidden=1536, n_heads=12, n_kv_heads=2,
                         head_dim=128, ffn_hidden=8960, vocab=151936,
                         tied_embeddings=True, qkv_bias=True),
    # Qwen/Qwen2.5-7B
    "qwen2.5-7b": dict(n_layers=28, hidden=3584, n_heads=28, n_kv_heads=4,
                       head_dim=128, ffn_hidden=18944, vocab=152064,
                       qkv_bias=True),
    # Qwen/Qwen2.5-Math-7B: the Qwen2.5-7B architecture and vocabulary
    # (152064); its config differs in rope_theta (10000, not 1e6) and
    # max_position_embeddings (4096, not 131072), neither of which changes
    # the parameter count.
    "qwen2.5-math-7b": dict(n_layers=28, hidden=3584, n_heads=28, n_kv_heads=4,
                            head_dim=128, ffn_hidden=18944, vocab=152064,
                            qkv_bias=True),
    # Qwen/Qwen2.5-32B
    "qwen2.5-32b": dict(n_layers=64, hidden=5120, n_heads=40, n_kv_heads=8,
                        head_dim=128, ffn_hidden=27648, vocab=152064,
                        qkv_bias=True),
    # Qwen/Qwen2.5-72B
    "qwen2.5-72b": dict(n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8,
                        head_dim=128, ffn_hidden=29568, vocab=152064,
                        qkv_bias=True),
    # ----- Qwen3 dense (model_type qwen3: head_dim 128 given explicitly) ----
    # Qwen/Qwen3-0.6B
    "qwen3-0.6b": dict(n_layers=28, hidden=1024, n_heads=16, n_kv_heads=8,
                       head_dim=128, ffn_hidden=3072, vocab=151936,
                       tied_embeddings=True),
    # Qwen/Qwen3-1.7B
    "qwen3-1.7b": dict(n_layers=28, hidden=2048, n_heads=16, n_kv_heads=8,
                       head_dim=128, ffn_hidden=6144, vocab=151936,
                       tied_embeddings=True),
    # Qwen/Qwen3-4B
    "qwen3-4b": dict(n_layers=36, hidden=2560, n_heads=32, n_kv_heads=8,
                     head_dim=128, ffn_hidden=9728, vocab=151936,
                     tied_embeddings=True),
    # Qwen/Qwen3-8B
    "qwen3-8b": dict(n_layers=36, hidden=4096, n_heads=32, n_kv_heads=8,
                     head_dim=128, ffn_hidden=12288, vocab=151936),
    # Qwen/Qwen3-14B
    "qwen3-14b": dict(n_layers=40, hidden=5120, n_heads=40, n_kv_heads=8,
                      head_dim=128, ffn_hidden=17408, vocab=151936),
    # Qwen/Qwen3-32B
    "qwen3-32b": dict(n_layers=64, hidden=5120, n_heads=64, n_kv_heads=8,
                      head_dim=128, ffn_hidden=25600, vocab=151936),
    # ----- Qwen3 MoE (model_type qwen3_moe: every layer sparse) ------------
    # Qwen/Qwen3-30B-A3B (intermediate_size 6144 is unused: no dense layer)
    "qwen3-30b-a3b": dict(n_layers=48, hidden=2048, n_heads=32, n_kv_heads=4,
                          head_dim=128, ffn_hidden=6144, vocab=151936,
                          n_experts=128, top_k=8, expert_ffn_hidden=768),
    # Qwen/Qwen3-235B-A22B (intermediate_size 12288 is unused)
    "qwen3-235b-a22b": dict(n_layers=94, hidden=4096, n_heads=64, n_kv_heads=4,
                            head_dim=128, ffn_hidden=12288, vocab=151936,
                            n_experts=128, top_k=8, expert_ffn_hidden=1536),
    # ----- DeepSeek-V3 (model_type deepseek_v3: MLA, 1 shared expert) ------
    # deepseek-ai/DeepSeek-V3: head_dim is qk_nope_head_dim; the 3 leading
    # layers (first_k_dense_replace) are dense; the one MTP module
    # (num_nextn_predict_layers) is recorded, not counted.
    "deepseek-v3": dict(n_layers=61, hidden=7168, n_heads=128, n_kv_heads=128,
                        head_dim=128, ffn_hidden=18432, vocab=129280,
                        n_experts=256, top_k=8, expert_ffn_hidden=2048,
                        shared_ffn_hidden=2048, first_dense_layers=3,
                        q_lora_rank=1536, kv_lora_rank=512,
                        qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1),
    # ----- Mixtral (model_type mixtral) ------------------------------------
    # mistralai/Mixtral-8x7B-v0.1
    "mixtral-8x7b": dict(n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8,
                         head_dim=128, ffn_hidden=14336, vocab=32000,
                         n_experts=8, top_k=2, expert_ffn_hidden=14336),
    # ----- OPT (model_type opt: ReLU MLP, biases, tied, 2048 + 2 positions) -
    # facebook/opt-350m (word_embed_proj_dim 512: embeddings of width 512
    # projected to and from the 1024-wide model; post-LN).
    "opt-350m": dict(n_layers=24, hidden=1024, n_heads=16, n_kv_heads=16,
                     head_dim=64, ffn_hidden=4096, vocab=50272,
                     gated_mlp=False, tied_embeddings=True, linear_bias=True,
                     learned_positions=2050, embed_dim=512),
    # facebook/opt-1.3b
    "opt-1.3b": dict(n_layers=24, hidden=2048, n_heads=32, n_kv_heads=32,
                     head_dim=64, ffn_hidden=8192, vocab=50272,
                     gated_mlp=False, tied_embeddings=True, linear_bias=True,
                     learned_positions=2050),
    # facebook/opt-6.7b
    "opt-6.7b": dict(n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32,
                     head_dim=128, ffn_hidden=16384, vocab=50272,
                     gated_mlp=False, tied_embeddings=True, linear_bias=True,
                     learned_positions=2050),
    # facebook/opt-13b
    "opt-13b": dict(n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40,
                    head_dim=128, ffn_hidden=20480, vocab=50272,
                    gated_mlp=False, tied_embeddings=True, linear_bias=True,
                    learned_positions=2050),
    # facebook/opt-30b
    "opt-30b": dict(n_layers=48, hidden=7168, n_heads=56, n_kv_heads=56,
                    head_dim=128, ffn_hidden=28672, vocab=50272,
                    gated_mlp=False, tied_embeddings=True, linear_bias=True,
                    learned_positions=2050),
    # facebook/opt-66b
    "opt-66b": dict(n_layers=64, hidden=9216, n_heads=72, n_kv_heads=72,
                    head_dim=128, ffn_hidden=36864, vocab=50272,
                    gated_mlp=False, tied_embeddings=True, linear_bias=True,
                    learned_positions=2050),
    # OPT-175B has no public config.json on the Hub (weights on request).
    # Layers, heads and width from the OPT paper (arXiv:2205.01068, Table 1);
    # ffn = 4 * width, vocabulary and positions as in the other OPT configs:
    # not checked against a config.json.
    "opt-175b": dict(n_layers=96, hidden=12288, n_heads=96, n_kv_heads=96,
                     head_dim=128, ffn_hidden=49152, vocab=50272,
                     gated_mlp=False, tied_embeddings=True, linear_bias=True,
                     learned_positions=2050),
}

PUBLISHED: dict[str, Published] = {
    # Hugging Face model pages (safetensors parameter count).
    "llama-3.1-8b": Published(8.03 * _B, 8.03 * _B),
    "llama-3.1-70b": Published(70.6 * _B, 70.6 * _B),
    # HF page for meta-llama/Llama-3.1-405B: 405.9B (not re-checked here;
    # Meta's model card rounds to 405B, also within 1%).
    "llama-3.1-405b": Published(405.9 * _B, 405.9 * _B),
    # HF pages of meta-llama/Llama-2-{7b,13b,70b}-hf: 6.74B, 13B, 69B (not
    # re-checked here). The paper's names 7B/70B are 3.8%/1.5% off the exact
    # counts 6.74B/68.98B, so they are not used.
    "llama-2-7b": Published(6.74 * _B, 6.74 * _B),
    "llama-2-13b": Published(13.0 * _B, 13.0 * _B),
    "llama-2-70b": Published(69.0 * _B, 69.0 * _B),
    # Qwen2.5 model cards, "Number of Parameters" (7.61B also matches the
    # Open Arabic LLM leaderboard's 7.616B for Qwen/Qwen2.5-7B). The
    # Qwen2.5-Math-7B card gives no count: same architecture as Qwen2.5-7B.
    "qwen2.5-1.5b": Published(1.54 * _B, 1.54 * _B),
    "qwen2.5-7b": Published(7.61 * _B, 7.61 * _B),
    "qwen2.5-math-7b": Published(7.61 * _B, 7.61 * _B),
    "qwen2.5-32b": Published(32.5 * _B, 32.5 * _B),
    "qwen2.5-72b": Published(72.7 * _B, 72.7 * _B),
    # Qwen3 model cards, "Number of Parameters".
    "qwen3-0.6b": Published(0.6 * _B, 0.6 * _B),
    # The card's "1.7B" is truncated: the count is 1.72B (+1.2%); the card's
    # non-embedding figure, 1.4B, matches 1.41B.
    "qwen3-1.7b": Published(1.7 * _B, 1.7 * _B, rtol=0.015),
    "qwen3-4b": Published(4.0 * _B, 4.0 * _B),
    "qwen3-8b": Published(8.2 * _B, 8.2 * _B),
    "qwen3-14b": Published(14.8 * _B, 14.8 * _B),
    "qwen3-32b": Published(32.8 * _B, 32.8 * _B),
    # Card: "30.5B in total and 3.3B activated". The activated count from the
    # config is 3.35B (+1.6%) with both embeddings, 3.04B without the input
    # embedding; "3.3B" is 3.35B truncated to two digits.
    "qwen3-30b-a3b": Published(30.5 * _B, 3.3 * _B, rtol=0.02),
    # Card: "235B in total and 22B activated".
    "qwen3-235b-a22b": Published(235 * _B, 22 * _B),
    # DeepSeek-V3 paper (arXiv:2412.19437): 671B total, 37B activated, for
    # the main model without the 14B multi-token-prediction module. The
    # rounded 37B is 1.5% below the config's 37.55B, so the breakdown in
    # deepseek-ai/DeepSeek-V3 README_WEIGHTS.md is used: one revision gives
    # 36.6B activated "including 0.9B for the output Head", i.e. without the
    # input embedding (another revision says 36.7B including both, which the
    # config does not support: 36.63B without the input embedding, 37.55B
    # with it). 36.6B plus the 0.9B input embedding gives 37.5B here.
    "deepseek-v3": Published(671 * _B, 37.5 * _B),
    # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B total, 12.9B per
    # token.
    "mixtral-8x7b": Published(46.7 * _B, 12.9 * _B),
    # OPT paper (arXiv:2205.01068) names the sizes; for 350M and 1.3B the names
    # are 5.4% and 1.2% off, so the Hugging Face safetensors counts (331M,
    # 1.32B, read from pages of unmodified copies) are used instead.
    "opt-350m": Published(0.331 * _B, 0.331 * _B),
    "opt-1.3b": Published(1.32 * _B, 1.32 * _B),
    "opt-6.7b": Published(6.7 * _B, 6.7 * _B),
    # "13B" is a name rounded to two digits; the count is 12.85B (-1.1%). No
    # finer published figure was found.
    "opt-13b": Published(13 * _B, 13 * _B, rtol=0.015),
    "opt-30b": Published(30 * _B, 30 * _B),
    "opt-66b": Published(66 * _B, 66 * _B),
    "opt-175b": Published(175 * _B, 175 * _B),
}

assert set(PRESETS) == set(PUBLISHED)


def names() -> tuple[str, ...]:
  """Names of the presets, in table order."""
  return tuple(PRESETS)


def _key(name: str) -> str:
  if not isinstance(name, str) or name.lower() not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; known presets: "
                     f"{', '.join(PRESETS)}")
  return name.lower()


@functools.cache
def _build(key: str) -> ModelSpec:
  return ModelSpec(name=key, **PRESETS[key])


def get(name: str) -> ModelSpec:
  """Returns the preset ``name`` (case-insensitive) as a :class:`ModelSpec`.

  Raises:
    ValueError: for an unknown name; the message lists the known ones.
  """
  return _build(_key(name))


def published_params(name: str) -> tuple[float, float]:
  """Published (total, active) parameter counts of the preset ``name``.

  Active counts include the input embedding and the LM head (the convention
  of ``ModelSpec.active_params``); see ``PUBLISHED`` for sources.

  Raises:
    ValueError: for an unknown name; the message lists the known ones.
  """
  p = PUBLISHED[_key(name)]
  return p.total, p.active
