"""Built-in example jobs: published reference configurations as an RLJob and a cluster.

``mlperf-rl-gbs{256,512,1024}``: the RL post-training benchmark of MLPerf
Training v6.1 (``llm_post_training``, "qwen3.5_397b_a17b_swe_grpo"), as its
reference configuration states it (mlcommons/training@aa344c7f,
``llm_post_training/README.md`` and ``qwen35_grpo_rcp_launch_instructions.md``):

* policy ``Qwen/Qwen3.5-397B-A17B`` (language model only), GRPO with
  asynchronous collection and a maximum trajectory age of one step
  (staleness 1); BF16 policy, FP32 optimizer state;
* global batch = prompts x 16 generations: 16, 32 or 64 prompts;
* multi-turn OpenHands/CodeAct software-engineering episodes of at most 30
  agent turns, context and generation capped at 65,536 tokens; training
  concurrency 256 episodes; a test run per episode (300 s timeout);
* reference layout on 256 GB300 GPUs in NVL72 racks, exposed as 64 nodes of
  4 GPUs: 16 nodes train (Megatron TP4 PP2 EP32), 48 nodes generate (vLLM
  TP8 EP8), disaggregated; prefix caching on; no MTP, no speculative
  decoding.

What the reference configuration does not state, and this example assumes
(:data:`MLPERF_ASSUMED`): the prompt length (system prompt, tools and issue),
the tokens of one agent turn and of one tool observation, and the tool-call
latencies. The benchmark's published results are not used anywhere.
"""

from __future__ import annotations

from costmodel._src.specs import hardware as hardware_lib
from costmodel._src.specs import hf_models
from costmodel._src.specs.cluster import Cluster
from costmodel._src.specs.job import ResponseLength
from costmodel._src.specs.job import RLJob
from costmodel._src.specs.multiturn import MultiTurn

MLPERF_SOURCE = ("mlcommons/training@aa344c7fb900e82ed19fb94aebfed50c63ab2204 "
                 "llm_post_training/README.md (reference configuration of "
                 "qwen3.5_397b_a17b_swe_grpo, MLPerf Training v6.1)")

# Stated by the reference configuration.
MLPERF_FACTS = dict(
    model="Qwen/Qwen3.5-397B-A17B", algorithm="grpo", samples_per_prompt=16,
    max_turns=30, context_cap=65536, staleness=1, nodes=64, gpus_per_node=4,
    scaleup_domain=72, train_nodes=16, generate_nodes=48, train_tp=4, train_pp=2,
    train_ep=32, engine_tp=8, engine_ep=8, env_concurrency=256, test_timeout_s=300.0)

# Not stated by the reference configuration: this example's assumptions.
MLPERF_ASSUMED = dict(
    prompt_len=8192.0,          # system prompt, tool schemas and the issue text
    turn_tokens_mean=512.0,     # one agent turn's output (thinking disabled)
    turn_tokens_max=2048.0,
    turns=30,                   # episodes taken at the turn cap
    observation_tokens=1024.0,  # one tool call's output appended to the context
    tool_latency_s_mean=2.0,    # a command in the task container (edit, grep, run)
    tool_latency_s_max=10.0,    # the slowest call of a round (a test run)
)

_GBS_PROMPTS = {256: 16, 512: 32, 1024: 64}


def names() -> tuple[str, ...]:
  """Names of the built-in example jobs."""
  return tuple(f"mlperf-rl-gbs{g}" for g in _GBS_PROMPTS)


def _gbs(name: str) -> int:
  if not isinstance(name, str) or name.lower() not in names():
    raise ValueError(f"unknown example {name!r}; known examples: {', '.join(names())}")
  return int(name.lower().removeprefix("mlperf-rl-gbs"))


def job(name: str) -> RLJob:
  """The example's RLJob (see the module docstring for facts and assumptions).

  Raises:
    ValueError: for an unknown name; the message lists the known ones.
  """
  prompts = _GBS_PROMPTS[_gbs(name)]
  a, f = MLPERF_ASSUMED, MLPERF_FACTS
  turns = MultiTurn(turns=a["turns"], tool_latency_s_mean=a["tool_latency_s_mean"],
                    tool_latency_s_max=a["tool_latency_s_max"],
                    observation_tokens=a["observation_tokens"], kv_reuse=True,
                    overlap_tools=True)
  return RLJob(f["algorithm"], hf_models.get(f["model"]), prompts_per_step=float(prompts),
               samples_per_prompt=float(f["samples_per_prompt"]), prompt_len=a["prompt_len"],
               response=ResponseLength.from_mean_max(a["turn_tokens_mean"], a["turn_tokens_max"]),
               multi_turn=turns)


def cluster(name: str, gpu: str = "GB300", nodes: int | None = None) -> Cluster:
  """The example's cluster: NVL72 racks exposed as nodes of 4 GPUs (``gpu``: GB200 or GB300)."""
  _gbs(name)
  f = MLPERF_FACTS
  return Cluster(hardware_lib.get(gpu), gpus_per_node=f["gpus_per_node"],
                 nodes=f["nodes"] if nodes is None else nodes,
                 scaleup_domain=f["scaleup_domain"])


def staleness(name: str) -> int:
  """The example's maximum trajectory age (asynchronous GRPO)."""
  _gbs(name)
  return MLPERF_FACTS["staleness"]
