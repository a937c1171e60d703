"""Agentic multi-turn episodes: the spec (``RLJob.multi_turn``).

An episode is ``turns`` rounds of model output, each but the last followed by
a tool or environment call: the call waits ``tool_latency`` (a distribution
given by its mean and its tail, the longest call of a round) and burns
``env_cpu_s`` CPU seconds on the environment's cores, then returns
``observation_tokens`` tokens appended to the context. With multi-turn, the
job's ``response`` is the length of one turn's output; the trained sequence
is the whole trajectory (prompt, every turn's output and every observation).
The stage model is :mod:`costmodel._src.stages.agentic`.
"""

from __future__ import annotations

import dataclasses

from costmodel._src import pytree


@pytree.pytree_dataclass
class MultiTurn:
  """Multi-turn rollouts with tool calls.

  Attributes:
    turns: Model turns per episode (>= 1; ``turns - 1`` tool calls).
    tool_latency_s_mean: Mean wall time of one tool call.
    tool_latency_s_max: The slowest call of a round (the distribution's
      tail; >= the mean).
    env_cpu_s: CPU seconds one tool call costs on the environment's cores.
    observation_tokens: Tokens a tool call appends to the context.
    env_cores: CPU cores of the environment; 0 means the cluster's.
    kv_reuse: Later turns keep the episode's KV cache (prefix caching across
      turns): they prefill only the new observation; else the whole context
      is prefilled again every turn.
    overlap_tools: Asynchronous rollouts: episodes advance independently and
      the engine decodes other episodes while one waits on its tool (an
      agent loop on a server-mode engine); False runs each turn as a batch
      with a barrier on the slowest tool call.
  """

  turns: int = pytree.static_field(default=4)
  tool_latency_s_mean: float = pytree.static_field(default=1.0)
  tool_latency_s_max: float = pytree.static_field(default=5.0)
  env_cpu_s: float = pytree.static_field(default=0.1)
  observation_tokens: float = pytree.static_field(default=256.0)
  env_cores: int = pytree.static_field(default=0)
  kv_reuse: bool = pytree.static_field(default=True)
  overlap_tools: bool = pytree.static_field(default=False)

  def __post_init__(self):
    pytree.check_integer("MultiTurn", 1, turns=self.turns)
    pytree.check_nonnegative("MultiTurn", tool_latency_s_mean=self.tool_latency_s_mean,
                             tool_latency_s_max=self.tool_latency_s_max,
                             env_cpu_s=self.env_cpu_s,
                             observation_tokens=self.observation_tokens)
    if self.tool_latency_s_max < self.tool_latency_s_mean:
      raise ValueError(f"MultiTurn: tool_latency_s_max={self.tool_latency_s_max} must be >= "
                       f"tool_latency_s_mean={self.tool_latency_s_mean}")
    pytree.check_integer("MultiTurn", 0, env_cores=self.env_cores)

  @property
  def tool_calls(self) -> int:
    return self.turns - 1

  def replace(self, **changes) -> MultiTurn:
    return dataclasses.replace(self, **changes)
