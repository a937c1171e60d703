"""The launch-script reader (export/_src/shell.py) and the importers reading scripts through it.

The scripts here are written for these tests in the shapes the frameworks'
examples use (arrays spread into the command, defaults, arithmetic, sourced
model files, case/if blocks on the device), not copied from any framework.
"""

import textwrap

import pytest

import export
from export._src import shell


def _script(tmp_path, text, name="run.sh"):
  path = tmp_path / name
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(textwrap.dedent(text))
  return str(path)


def test_defaults_arithmetic_arrays_and_continuations(tmp_path):
  path = _script(tmp_path, """\
      #!/bin/bash
      set -euo pipefail
      NNODES=${NNODES:-2}
      GPUS=$(( NNODES * 8 ))
      export TP=4
      HALF=$((GPUS / TP / 2))
      ARGS=(
         --a 1   # a comment with an apostrophe's quote
         --b "two words"
      )
      ARGS+=(--gpus "${GPUS}")
      EMPTY=()
      python3 train.py \\
         "${ARGS[@]}" "${EMPTY[@]}" --half $HALF --data "$HOME/x.jsonl" "$@"
      """)
  run = shell.read_script(path)
  assert run.commands[-1] == ["python3", "train.py", "--a", "1", "--b", "two words", "--gpus",
                              "16", "--half", "2", "--data", "${HOME}/x.jsonl"]
  assert run.unresolved == {"HOME"}


def test_source_relative_to_the_script_and_case_and_if(tmp_path):
  _script(tmp_path, """\
      MODEL_ARGS=(--num-layers 36 --hidden-size 2560)
      """, "scripts/models/m.sh")
  path = _script(tmp_path, """\
      DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
      source "${DIR}/models/m.sh"
      DEVICE=${DEVICE:-gpu}
      case "${DEVICE}" in
        npu|ascend)
          TP=8
          ;;
        gpu)
          TP=2
          if [ "$TP" -gt 1 ] && [ "${DEVICE}" = gpu ]; then
            SP=(--sequence-parallel)
          else
            SP=()
          fi
          ;;
      esac
      for SEED in 7 8; do
        LAST=$SEED
      done
      run() { python3 train.py "${MODEL_ARGS[@]}" --tp ${TP} "${SP[@]}" --seed $LAST; }
      run
      """, "scripts/run.sh")
  run = shell.read_script(path)
  assert run.commands[-1] == ["python3", "train.py", "--num-layers", "36", "--hidden-size",
                              "2560", "--tp", "2", "--sequence-parallel", "--seed", "7"]
  assert any("'for SEED' runs once" in n for n in run.notes)


def test_undecided_test_takes_its_first_branch_and_says_so(tmp_path):
  path = _script(tmp_path, """\
      N=$(nvidia-smi -L | wc -l)
      if [ "$N" -gt 0 ]; then GPUS=$N; else GPUS=8; fi
      if [ -z "$GPUS" ] || [ "$GPUS" -le 0 ]; then GPUS=8; fi
      echo run --gpus $GPUS
      """)
  run = shell.read_script(path)
  assert run.commands[-1] == ["echo", "run", "--gpus", "8"]
  assert len(run.notes) == 2


def test_parameter_forms(tmp_path):
  path = _script(tmp_path, """\
      P=/ckpt/Qwen3-8B-Instruct
      A=(x y z)
      echo ${P##*/} ${P%-Instruct} ${#A[@]} ${A[1]} ${U:-d} ${P/Qwen3/Q} ${P:1:4} ${E:+alt}
      """)
  assert shell.read_script(path).commands[-1] == [
      "echo", "Qwen3-8B-Instruct", "/ckpt/Qwen3-8B", "3", "y", "d", "/ckpt/Q-8B-Instruct", "ckpt"]


def test_unterminated_quote_is_refused_naming_it(tmp_path):
  path = _script(tmp_path, "X='abc\npython3 train.py\n")
  with pytest.raises(ValueError, match="unterminated '"):
    shell.read_script(path)


VERL_MEGATRON = """\
    set -xeuo pipefail
    MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-8B}
    NNODES=${NNODES:-2}
    TP=${TP:-4}
    DATA=(
        algorithm.adv_estimator=grpo
        data.train_files="['$HOME/data/train.parquet']"
        data.train_batch_size=256
        data.max_prompt_length=$((1024 * 2))
        data.max_response_length=4096
    )
    ACTOR=(
        actor_rollout_ref.model.path="$MODEL_PATH"
        actor_rollout_ref.actor.ppo_mini_batch_size=64
        actor_rollout_ref.actor.use_dynamic_bsz=True
        actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576
        actor_rollout_ref.actor.use_kl_loss=True
        actor_rollout_ref.actor.megatron.tensor_model_parallel_size=${TP}
        actor_rollout_ref.rollout.tensor_model_parallel_size=2
        actor_rollout_ref.rollout.n=8
        trainer.nnodes=${NNODES}
        trainer.n_gpus_per_node=8
    )
    python3 -m verl.trainer.main_ppo --config-path=config \\
        --config-name='ppo_megatron_trainer.yaml' "${DATA[@]}" "${ACTOR[@]}" "$@"
    """


def test_verl_script_with_arrays_imports_megatron_from_the_config_name(tmp_path):
  imp = export.read_config("verl", _script(tmp_path, VERL_MEGATRON), response_mean=1000)
  job, plan, cluster = imp
  actor = plan.roles[0]
  assert (float(actor.train.tp), float(actor.train.zero_stage)) == (4.0, 1.0)  # Megatron
  assert float(plan.pools[0].gpus) == 16 and float(plan.engine.tp) == 2
  assert float(job.prompt_len) == 2048
  # dynamic batch: 24,576 tokens / (2,048 + 1,000) = 8 samples, the largest <= 8 that divides
  # the mini-batch's 64 x 8 samples over DP = 16 / 4 = 4 ranks (128 each)
  assert float(actor.train.micro_batch) == 8


def test_verl_model_engine_and_lora(tmp_path):
  text = VERL_MEGATRON.replace("--config-name='ppo_megatron_trainer.yaml'", "").replace(
      "trainer.n_gpus_per_node=8", "trainer.n_gpus_per_node=8\n        "
      "actor_rollout_ref.model.lora_rank=64\n        actor_rollout_ref.actor.fsdp_config."
      "param_offload=True")
  imp = export.read_config("verl", _script(tmp_path, text), response_mean=1000)
  assert float(imp.job.lora.rank) == 64
  assert float(imp.plan.roles[0].train.zero_stage) == 3  # FSDP: no model_engine given
  # a key a cost depends on that the Megatron reader does not read is listed, not dropped
  imp = export.read_config("verl", _script(tmp_path, text.replace(
      '"$@"', "model_engine=megatron"), "m.sh"), response_mean=1000)
  assert float(imp.plan.roles[0].train.tp) == 4
  assert "actor_rollout_ref.actor.fsdp_config.param_offload=True" in imp.not_modelled
  with pytest.raises(ValueError, match="model_engine='torchtitan'"):
    export.read_config("verl", _script(tmp_path, text.replace(
        '"$@"', "model_engine=torchtitan"), "t.sh"), response_mean=1000)


def test_quoted_continuations_and_a_composed_string_split_around_an_unknown(tmp_path):
  path = _script(tmp_path, """      model_path=${model_path:-$HOME/models/Qwen3-8B}
      ACTOR="
          actor.lr=1e-6 \\
          model.path=$model_path"
      ACTOR="$ACTOR extra.key=1"
      EXTRA=(
          $ACTOR
      )
      nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
      nodes_array=( $nodes )
      python3 -m verl.trainer.main_ppo "${EXTRA[@]}" head="${nodes_array[0]}"
      """)
  run = shell.read_script(path)
  # the backslash-newline inside double quotes joins the lines; the composed string splits
  # on its own blanks though one of its parts is unknown ($HOME); an unknown command's
  # output stays one word
  assert run.commands[-1][3:-1] == ["actor.lr=1e-6", "model.path=${HOME}/models/Qwen3-8B",
                                    "extra.key=1"]
  assert run.commands[-1][-1].startswith("head=$(scontrol show hostnames")


def test_verl_unassigned_variable_in_a_cost_setting_is_refused_naming_it(tmp_path):
  text = VERL_MEGATRON.replace("NNODES=${NNODES:-2}\n", "")
  with pytest.raises(ValueError, match=r"trainer.nnodes='\$\{NNODES\}' is set from a variable"):
    export.read_config("verl", _script(tmp_path, text), response_mean=1000)
