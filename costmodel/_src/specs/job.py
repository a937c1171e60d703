"""The RL post-training job: algorithm, models, batch and lengths."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from costmodel._src import pytree
from costmodel._src.ops import lora as lora_lib
from costmodel._src.specs import model as model_lib
from costmodel._src.specs import multiturn as multiturn_lib

ALGORITHMS = ("ppo", "grpo", "dapo", "reinforce_pp", "rloo", "remax")


@pytree.pytree_dataclass
class ResponseLength:
  """Response lengths as K equal-mass bins, shortest first.

  ``knots[k]`` is the length of the sequences in bin k (each bin holds 1/K of
  the samples); the last knot is the longest response. The tail of generation
  is driven by these knots: while bin k decodes, only the bins >= k are alive.

  Build with :meth:`from_mean_max` (a power-law quantile function
  ``L(u) = max * u**alpha`` rescaled to the exact mean) or :meth:`from_samples`.
  """

  knots: jax.Array

  def __post_init__(self):
    if pytree.is_concrete(self.knots):
      k = np.asarray(self.knots, dtype=float)
      if k.ndim != 1 or k.size < 1:
        raise ValueError(f"ResponseLength: knots must be a 1-D array, got shape {k.shape}")
      if not np.all(np.isfinite(k)) or np.any(k <= 0):
        raise ValueError(f"ResponseLength: knots={k.tolist()} must be finite and > 0")
      if np.any(np.diff(k) < -1e-6):
        raise ValueError(f"ResponseLength: knots={k.tolist()} must be sorted ascending")

  @classmethod
  def from_mean_max(cls, mean: float, max_len: float,
                    bins: int | None = None) -> ResponseLength:
    """A length distribution with the given mean and maximum.

    ``bins=None`` picks ``max(16, ceil(2 * max_len / mean))`` (at most 256) for
    concrete inputs, so a long maximum over a short mean keeps a thin tail
    (1/K of the responses reach the maximum), and 32 for traced ones.

    The knots are ``1 + c * L(u_k)`` for the first K-1 bins, with ``c`` set so
    that the mean is exact, and ``max_len`` for the last: every response is at
    least one token long, so the mean must be at least
    ``(max_len + bins - 1) / bins``.

    Raises:
      ValueError: when ``mean`` or ``max_len`` is not positive, when
        ``mean > max_len``, when ``bins < 1``, or when ``mean`` is below the
        smallest mean that ``bins`` bins ending at ``max_len`` can hold.
    """
    if bins is None:
      if pytree.is_concrete(mean) and pytree.is_concrete(max_len) and float(mean) > 0:
        bins = int(min(256, max(16, np.ceil(2.0 * float(max_len) / float(mean)))))
      else:
        bins = 32
    pytree.check_integer("ResponseLength", 1, bins=bins)
    pytree.check_positive("ResponseLength", mean=mean, max_len=max_len)
    if pytree.is_concrete(mean) and pytree.is_concrete(max_len):
      if float(mean) > float(max_len) * (1 + 1e-9):
        raise ValueError(f"ResponseLength: mean={mean} must not exceed max_len={max_len}")
      lowest = (float(max_len) + bins - 1) / bins
      if float(mean) < lowest * (1 - 1e-9):
        raise ValueError(
            f"ResponseLength: mean={mean} is below {lowest:g}, the smallest mean of "
            f"bins={bins} equal-mass bins whose last knot is max_len={max_len}; use "
            "more bins")
    # Plain numbers are computed with NumPy (no small programs to compile at
    # set-up), traced ones with jax.numpy: the same formula either way.
    xp = np if pytree.is_concrete(mean) and pytree.is_concrete(max_len) else jnp
    mean = xp.asarray(mean, dtype=np.float32)
    max_len = xp.asarray(max_len, dtype=np.float32)
    if bins == 1:
      return cls(knots=jnp.reshape(max_len, (1,)))
    u = xp.arange(1, bins + 1, dtype=np.float32) / np.float32(bins)
    alpha = xp.maximum(max_len / mean - np.float32(1.0), np.float32(0.0))
    raw = max_len * u ** alpha
    # Map the first K-1 knots affinely onto [1, ...] so the discrete mean is
    # exact, every knot is at least one token and the last stays at max_len.
    rest = xp.sum(raw[:-1])
    scale = (np.float32(bins) * mean - max_len - np.float32(bins - 1)) / xp.maximum(
        rest, np.float32(1e-9))
    head = xp.clip(np.float32(1.0) + raw[:-1] * xp.maximum(scale, np.float32(0.0)),
                   np.float32(1.0), max_len)
    return cls(knots=jnp.asarray(xp.concatenate([head, max_len[None]])))

  @classmethod
  def from_samples(cls, lengths, bins: int = 16) -> ResponseLength:
    """Equal-mass bins from observed lengths (bin means; the last knot is the max)."""
    x = np.sort(np.asarray(lengths, dtype=float))
    if x.ndim != 1 or x.size == 0 or np.any(x <= 0):
      raise ValueError("ResponseLength.from_samples: lengths must be a non-empty list of positives")
    bins = min(bins, x.size)
    parts = np.array_split(x, bins)
    knots = np.array([p.mean() for p in parts])
    # keep the total exact while putting the longest response at the end
    knots[-1] = x[-1]
    knots[:-1] *= max(x.sum() - parts[-1].size * x[-1], 1.0) / max(
        sum(p.size * k for p, k in zip(parts[:-1], knots[:-1], strict=True)), 1.0)
    weights = np.array([p.size for p in parts], dtype=float)
    # Equal-mass approximation: bins differ by at most one sample.
    del weights
    return cls(knots=jnp.asarray(np.maximum.accumulate(knots)))

  @property
  def bins(self) -> int:
    return int(np.shape(self.knots)[-1])

  @property
  def mean(self) -> jax.Array:
    return jnp.mean(self.knots, axis=-1)

  @property
  def max(self) -> jax.Array:
    return self.knots[..., -1]


@pytree.pytree_dataclass
class RLJob:
  """One RL post-training job.

  Attributes:
    algorithm: One of ``ppo``, ``grpo``, ``dapo``, ``reinforce_pp``, ``rloo``,
      ``remax``.
    actor: The policy model (also the reference model's architecture).
    critic: The value model (PPO); ``None`` defaults to the actor's
      architecture for PPO and to no critic otherwise.
    reward_model: A reward model; ``None`` means a rule-based verifier on CPU.
    use_reference: Whether a reference model (KL term) is computed. ``None``
      picks the algorithm's default (DAPO drops the KL term).
    prompts_per_step: Prompts per RL step.
    samples_per_prompt: Responses sampled per prompt (GRPO's group size).
    prompt_len: Prompt tokens.
    response: Response-length distribution.
    ppo_epochs: Passes over the batch per step.
    mini_batches: Optimizer updates per epoch.
    oversample: DAPO dynamic sampling: generated / kept samples (>= 1).
    reward_cpu_s_per_sample: CPU seconds per sample for a rule-based reward
      (decode and score; 1.3 ms fitted on veRL's step time outside its timed
      stages, see benchmarks/results/fidelity.md). A single controller scores
      in one process (``Mode.single_controller``), otherwise the cluster's
      cores share it.
    param_bytes: Bytes per parameter for weights (2 for BF16).
    grad_bytes: Bytes per gradient element.
    optimizer_bytes: Optimizer-state bytes per parameter (12 for mixed-precision
      Adam: FP32 master weights, momentum, variance).
    kv_bytes: Bytes per KV-cache element (1 for FP8 caches).
    logits_bytes: Bytes per logit element held for log-probs (2: BF16 logits,
      upcast to FP32 chunk by chunk inside the log-softmax).
    lora: A :class:`~costmodel.LoRA` to train the actor's adapters only (the
      base frozen); None trains every weight.
    multi_turn: A :class:`~costmodel.MultiTurn` for agentic episodes (then
      ``response`` is one turn's output); None for single-turn responses.
  """

  algorithm: str = pytree.static_field()
  actor: model_lib.ModelSpec = pytree.static_field()
  prompts_per_step: jax.Array | float = 512.0
  samples_per_prompt: jax.Array | float = 8.0
  prompt_len: jax.Array | float = 1024.0
  response: ResponseLength = dataclasses.field(
      default_factory=lambda: ResponseLength.from_mean_max(2000.0, 8192.0))
  critic: model_lib.ModelSpec | None = pytree.static_field(default=None)
  reward_model: model_lib.ModelSpec | None = pytree.static_field(default=None)
  use_reference: bool | None = pytree.static_field(default=None)
  ppo_epochs: int = pytree.static_field(default=1)
  mini_batches: int = pytree.static_field(default=1)
  oversample: jax.Array | float = 1.0
  reward_cpu_s_per_sample: jax.Array | float = 1.3e-3
  param_bytes: float = pytree.static_field(default=2.0)
  grad_bytes: float = pytree.static_field(default=2.0)
  optimizer_bytes: float = pytree.static_field(default=12.0)
  kv_bytes: float = pytree.static_field(default=2.0)
  logits_bytes: float = pytree.static_field(default=2.0)
  lora: lora_lib.LoRA | None = pytree.static_field(default=None)
  multi_turn: multiturn_lib.MultiTurn | None = pytree.static_field(default=None)

  def __post_init__(self):
    pytree.check_instance("RLJob", lora_lib.LoRA, optional=True, lora=self.lora)
    pytree.check_instance("RLJob", multiturn_lib.MultiTurn, optional=True,
                          multi_turn=self.multi_turn)
    pytree.check_one_of("RLJob", ALGORITHMS, algorithm=self.algorithm)
    pytree.check_instance("RLJob", model_lib.ModelSpec, actor=self.actor)
    if self.critic is None and self.algorithm == "ppo":
      object.__setattr__(self, "critic", self.actor)
    if self.critic is not None and self.algorithm != "ppo":
      raise ValueError(f"RLJob: critic given but algorithm={self.algorithm!r} has no critic")
    if self.use_reference is None:
      object.__setattr__(self, "use_reference", self.algorithm != "dapo")
    pytree.check_integer("RLJob", 1, ppo_epochs=self.ppo_epochs, mini_batches=self.mini_batches)
    pytree.check_positive("RLJob", prompts_per_step=self.prompts_per_step,
                          samples_per_prompt=self.samples_per_prompt,
                          prompt_len=self.prompt_len, param_bytes=self.param_bytes,
                          grad_bytes=self.grad_bytes, kv_bytes=self.kv_bytes,
                          logits_bytes=self.logits_bytes)
    pytree.check_nonnegative("RLJob", reward_cpu_s_per_sample=self.reward_cpu_s_per_sample,
                             optimizer_bytes=self.optimizer_bytes)
    pytree.check_at_least("RLJob", 1, oversample=self.oversample)
    pytree.check_instance("RLJob", ResponseLength, response=self.response)
    if pytree.is_concrete(self.prompts_per_step) and pytree.is_concrete(self.samples_per_prompt):
      n = float(self.prompts_per_step) * float(self.samples_per_prompt)
      if n < self.mini_batches:
        raise ValueError(f"RLJob: mini_batches={self.mini_batches} exceeds the "
                         f"{n:g} samples per step")

  @property
  def has_critic(self) -> bool:
    return self.critic is not None

  @property
  def has_reward_model(self) -> bool:
    return self.reward_model is not None

  @property
  def samples_per_step(self) -> jax.Array:
    """Samples trained on per step."""
    return jnp.asarray(self.prompts_per_step, float) * self.samples_per_prompt

  @property
  def generated_samples_per_step(self) -> jax.Array:
    """Samples generated per step (DAPO oversampling; ReMax's greedy baseline)."""
    n = self.samples_per_step * self.oversample
    if self.algorithm == "remax":
      n = n + jnp.asarray(self.prompts_per_step, float)
    return n

  @property
  def bytes_per_param_trained(self) -> float:
    """Weights + gradients + optimizer state per parameter (16 for Adam)."""
    return self.param_bytes + self.grad_bytes + self.optimizer_bytes

  def replace(self, **changes) -> RLJob:
    return dataclasses.replace(self, **changes)
