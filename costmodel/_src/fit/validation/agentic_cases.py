"""veRL's multi-turn tool-calling runs (``published_rl.csv`` rows 9 and 10).

Source: volcengine/verl@b178a3c
``verl/experimental/fully_async_policy/README.md`` ("Multi-Turn Tool
Calling"; the timings come from the wandb project it links) and the script it
names, ``verl/experimental/fully_async_policy/shell/dapo_7b_async_retool.sh``
(with ``recipe/retool/run_qwen2_7b_dapo.sh`` for the colocated run): DAPO on
a ReTool-SFT Qwen2.5-7B-Instruct, 64 prompts x 16 responses per step, at most
2,048 prompt and 16,384 response tokens (the whole trajectory: every turn's
output and every tool observation), up to 16 assistant turns with a
SandboxFusion code interpreter, vLLM TP 4 behind an agent loop (episodes
advance on their own: tool calls overlap decoding), Ulysses SP 4 with FSDP2,
32 H20.

* rl:9, colocated and synchronous: actor parameters and optimizer offloaded
  (``offload=True``), memory fraction 0.9; gen 228.03 s, old_log_prob
  35.19 s, update_actor 111.84 s, step 375.47 s.
* rl:10, 16 + 16 fully asynchronous: staleness threshold 1, partial
  rollouts, ``require_batches`` 1, ``trigger_parameter_sync_step`` 4 (a step
  is 4 x 1 x 16 = 64 prompts), old log-probs from the rollout, no offload,
  memory fraction 0.8; step 221.36 s, update_actor 179.58 s. As for the
  other fully asynchronous runs of the same README (rl:2-6, N1-N9: the
  asynchronous settings change the response lengths), its tokens per turn
  are inferred from its own ``update_actor`` (a second anchor), so its step
  is the prediction.

Not published: the turns per episode, the tokens per turn and per
observation, and the tool latency. The cases assume :data:`TURNS` model turns
(three code calls), observations of :data:`OBSERVATION_TOKENS` tokens and
SandboxFusion calls of :data:`CALL_S` (five times that in the tail), each
holding one of the :data:`SANDBOX_SLOTS` execution slots the tool's
configuration allows, and infer the mean
tokens per turn from rl:9's ``update_actor`` (the group's anchor, as for the
other groups whose lengths are not published: training time follows the
trajectory's tokens; rl:10's from its own), so the other four numbers are
predictions.
With 1 s calls the 32 slots serve 1,024 x 3 calls in about 96 s, just under
the engine's busy time, so generation comes out at about 104 s against the
published 228 s; calls of 2.4 s would make the sandbox the bottleneck and
match rl:9's ``gen`` and step and rl:10's step within 3% (not assumed: the
call time is not published).
:func:`sensitivity` shows how they move with the assumed turns: the
training and log-prob predictions barely (the anchor pins the trajectory's
tokens); generation not at all from 2 to 4 turns, but at 8 turns (7 calls an
episode) the sandbox binds and ``gen`` comes out within 1%.
"""

from __future__ import annotations

from costmodel._src.fit.validation import rl_cases
from costmodel._src.ops.efficiency import Efficiency
from costmodel._src.specs import model_presets
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.layout import Parallel
from costmodel._src.specs.multiturn import MultiTurn
from costmodel._src.specs.plan import Mode
from costmodel._src.specs.plan import Plan
from costmodel._src.specs.plan import Pool
from costmodel._src.specs.plan import RolePlan

VERL_RETOOL = ("volcengine/verl@b178a3c verl/experimental/fully_async_policy/README.md "
               "(Multi-Turn Tool Calling), shell/dapo_7b_async_retool.sh; "
               "recipe/retool/run_qwen2_7b_dapo.sh")
TURNS = 4
"""Assumed model turns per episode (not published)."""
OBSERVATION_TOKENS = 128.0
"""Assumed tokens of one interpreter observation (not published)."""
PROMPT_TOKENS = 256.0
"""Assumed mean prompt (DAPO-Math-17k problems with the ReTool instruction)."""
MAX_TRAJECTORY = 16384.0  # the scripts' max_response_length
CALL_S = 1.0
"""Assumed wall time of one sandbox call, holding its execution slot (not published)."""
SANDBOX_SLOTS = 32
"""Concurrent code executions: ``num_workers: 4`` in
``recipe/retool/sandbox_fusion_tool_config.yaml`` (volcengine/verl@83e82cd)
is the ``max_concurrency`` of each tool instance's execution actor
(``verl/tools/sandbox_fusion_tools.py`` ``init_execution_pool``), one
instance per agent-loop worker (``rollout.agent.num_workers: 8``,
``verl/trainer/config/rollout/rollout.yaml``); the global rate limit (128)
does not bind."""


def _cap(turns: int) -> float:
  """The longest turn: the trajectory budget less the observations, per turn."""
  return (MAX_TRAJECTORY - (turns - 1) * OBSERVATION_TOKENS) / turns


def _job(mean_per_turn: float, turns: int) -> RLJob:
  cap = _cap(turns)
  mt = MultiTurn(turns=turns, tool_latency_s_mean=CALL_S, tool_latency_s_max=5.0 * CALL_S,
                 env_cpu_s=CALL_S, observation_tokens=OBSERVATION_TOKENS,
                 env_cores=SANDBOX_SLOTS, kv_reuse=True, overlap_tools=True)
  return RLJob("dapo", model_presets.get("qwen2.5-7b"), prompts_per_step=64.0,
               samples_per_prompt=16.0, prompt_len=PROMPT_TOKENS,
               response=ResponseLength.from_mean_max(min(mean_per_turn, 0.9 * cap), cap),
               mini_batches=4, multi_turn=mt)


def _fsdp(job: RLJob, swap: float) -> Parallel:
  # ppo_max_token_len_per_gpu = prompt + response = 18,432 tokens, SP 4.
  seq = PROMPT_TOKENS + float(job.response.mean) * job.multi_turn.turns
  return Parallel(tp=1.0, pp=1.0, cp=4.0, micro_batch=max(1.0, round(18432.0 * 4 / seq)),
                  zero_stage=3.0, recompute=2.0, swap=swap)


def runs(mean_per_turn: float, turns: int = TURNS,
         async_mean_per_turn: float | None = None) -> list[rl_cases.Run]:
  """rl:9 (colocated, 32 H20) and rl:10 (16 + 16 fully async, tokens per turn
  ``async_mean_per_turn``, default ``mean_per_turn``)."""
  if async_mean_per_turn is None:
    async_mean_per_turn = mean_per_turn
  cluster = rl_cases.h20_cluster(32)
  job = _job(mean_per_turn, turns)
  async_job = _job(async_mean_per_turn, turns)
  colocated = Plan.colocated(job, cluster, train=_fsdp(job, swap=1.0),
                             engine=Engine(tp=4.0, memory_fraction=0.9, max_seqs=1024.0))
  split = Plan(pools=(Pool("gen", 16.0), Pool("train", 16.0)),
               roles=(RolePlan("actor", "train", train=_fsdp(async_job, swap=0.0)),),
               engine=Engine(tp=4.0, memory_fraction=0.8, max_seqs=1024.0), rollout_pool="gen",
               mode=Mode(staleness=1, staleness_threshold=1.0, partial_rollout=True,
                         require_batches=1, rollout_log_probs=True))
  def note(mean, row):
    return (f"{turns} turns assumed (not published), {mean:.0f} tokens per turn inferred "
            f"from {row}'s update_actor; observations and tool latency assumed")

  return [rl_cases.Run("verl-retool-colocated-32", "veRL ReTool DAPO 7B colocated, 32 H20",
                       job, colocated, cluster, 375.47,
                       {"gen": 228.03, "old_log_prob": 35.19, "update_actor": 111.84},
                       ("rl:9",), VERL_RETOOL, note(mean_per_turn, "rl:9")),
          rl_cases.Run("verl-retool-async-32", "veRL ReTool DAPO 7B fully async 16+16 H20",
                       async_job, split, cluster, 221.36, {"update_actor": 179.58}, ("rl:10",),
                       VERL_RETOOL, note(async_mean_per_turn, "rl:10"))]


ANCHOR_KEY, ANCHOR_STAGE = "verl-retool-colocated-32", "update_actor"
ASYNC_ANCHOR_KEY = "verl-retool-async-32"


_MEANS: dict[tuple[int, str], float] = {}


def inferred_mean(turns: int = TURNS, key: str = ANCHOR_KEY) -> float:
  """Mean tokens per turn at which run ``key``'s ``update_actor`` matches
  (:func:`~costmodel._src.fit.validation.anchors.infer_mean_response`, cached
  per turn count and run)."""
  if (turns, key) not in _MEANS:
    # A first guess above an eighth of the longest turn keeps the length
    # distribution at its 16 bins, the inferred means' (0.17-0.29 of it), so
    # every call has one shape: one compilation per run and turn count.
    _MEANS[turns, key] = rl_cases.infer_mean_response(
        lambda m: runs(m, turns), key, ANCHOR_STAGE, guess=0.25 * _cap(turns))
  return _MEANS[turns, key]


def cases(turns: int = TURNS) -> list:
  """The rows as prediction cases (group ``rl_multi_turn``); the anchors' own
  ``update_actor`` is left out (it is matched, not predicted)."""
  out = []
  for run in runs(inferred_mean(turns), turns, inferred_mean(turns, ASYNC_ANCHOR_KEY)):
    for c in rl_cases.run_cases(run):
      if (run.key in (ANCHOR_KEY, ASYNC_ANCHOR_KEY)
          and c.label.endswith(f": {ANCHOR_STAGE}")):
        continue
      out.append(c._replace(group="rl_multi_turn"))
  return out


def sensitivity(turns_options=(2, 4, 8)) -> dict[int, dict[str, float]]:
  """Prediction / published - 1 of every case at each assumed turn count."""
  eff = Efficiency()
  return {t: {c.label: c.predict(eff) / c.published - 1.0 for c in cases(t)}
          for t in turns_options}
