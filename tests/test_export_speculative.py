"""Speculative decoding in exports and imports: NeMo-RL's
``policy.generation.vllm_kwargs.speculative_config`` and slime's
``--sglang-speculative-*`` flags written, checked against the pinned keys, read back;
frameworks that pass no draft to their engine refuse it by name."""

from __future__ import annotations

import cli_checks
import framework_checks
import pytest
import test_export_frameworks as grid

import costmodel as cm
import export

SPEC = "policy.generation.vllm_kwargs.speculative_config"
DRAFT = cm.models.get("qwen2.5-0.5b")


def _plan(framework, spec=None):
  """The first plan of the export grid ``framework`` runs, with ``spec`` in its engine."""
  for _, job, plan, cluster in grid.GRID:
    plan = grid.for_framework(framework, plan)
    plan = plan.replace(engine=plan.engine.replace(speculative=spec))
    for options in grid.OPTIONS[framework]:
      try:
        export.get(framework).to_config(plan, job, cluster, **options)
      except ValueError:
        continue
      return job, plan, cluster, options
  pytest.fail(f"no plan of the grid exports to {framework}")


def _given(job, plan, acceptance=None):
  kw = dict(model=job.actor, response_mean=1500.0, gpus_per_node=8,
            engine_max_seqs=float(plan.engine.max_seqs))
  if acceptance is not None:
    kw["speculative_acceptance"] = acceptance
  return kw


def _argv_value(argv, flag):
  return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("kind, tokens, draft, method, algorithm", [
    ("eagle", 3.0, None, "eagle3", "EAGLE3"),
    ("draft", 4.0, DRAFT, "draft_model", "STANDALONE"),
    ("ngram", 5.0, None, "ngram", "NGRAM"),
])
def test_export_writes_the_keys_and_import_gives_the_draft_back(kind, tokens, draft, method,
                                                                algorithm):
  spec = cm.Speculative(kind, draft_tokens=tokens, acceptance=0.6, draft_model=draft)
  k = int(tokens)

  job, plan, cluster, options = _plan("nemo_rl", spec)
  cfg = export.to_nemo_rl(plan, job, cluster, **options)
  written = cfg["policy"]["generation"]["vllm_kwargs"]["speculative_config"]
  assert written["method"] == method and written["num_speculative_tokens"] == k
  assert written.get("model") == (None if draft is None else "qwen2.5-0.5b")
  assert framework_checks.check_nemo_rl(cfg) == []
  back = export.read_config("nemo_rl", cfg, **_given(job, plan, 0.6))
  got = back.plan.engine.speculative
  assert (got.kind, float(got.draft_tokens), got.draft_model) == (kind, tokens, draft)
  assert float(got.acceptance) == pytest.approx(0.6)
  assert any("speculative acceptance 0.6" in n and "speculative_acceptance=" in n
             for n in back.not_modelled)

  job, plan, cluster, options = _plan("slime", spec)
  settings = export.get("slime").to_config(plan, job, cluster, **options)
  argv = settings["argv"]
  assert _argv_value(argv, "--sglang-speculative-algorithm") == algorithm
  assert _argv_value(argv, "--sglang-speculative-num-steps") == str(k)
  assert _argv_value(argv, "--sglang-speculative-eagle-topk") == "1"
  assert _argv_value(argv, "--sglang-speculative-num-draft-tokens") == str(k + 1)
  assert ("--sglang-speculative-draft-model-path" in argv) == (draft is not None)
  assert cli_checks.check_slime(settings) == []
  got = export.read_config("slime", settings, **_given(job, plan, 0.6)).plan.engine.speculative
  assert (got.kind, float(got.draft_tokens), got.draft_model) == (kind, tokens, draft)


def test_hand_written_nemo_rl_config_in_the_eagle3_recipe_shape_imports_its_draft():
  job, plan, cluster, options = _plan("nemo_rl")
  cfg = export.to_nemo_rl(plan, job, cluster, **options)
  # the shape of examples/configs/recipes/llm/grpo-qwen3-1.7b-1n8g-megatron-eagle3.yaml
  cfg["policy"]["generation"]["vllm_kwargs"]["speculative_config"] = {
      "method": "eagle3", "model": "/ckpt/eagle3-head", "num_speculative_tokens": 3,
      "draft_tensor_parallel_size": 1}
  back = export.read_config("nemo_rl", cfg, **_given(job, plan, 0.75))
  got = back.plan.engine.speculative
  assert (got.kind, float(got.draft_tokens), float(got.acceptance)) == ("eagle", 3.0, 0.75)
  assert f"{SPEC}.draft_tensor_parallel_size" in " ".join(back.not_modelled)
  # no acceptance given: vLLM #29334's EAGLE measurement, 1.70 tokens per step at k = 1
  assumed = export.read_config("nemo_rl", cfg, **_given(job, plan))
  assert float(assumed.plan.engine.speculative.acceptance) == pytest.approx(0.70)
  assert any("speculative acceptance 0.7 per draft token assumed" in n
             for n in assumed.not_modelled)
  cfg["policy"]["generation"]["vllm_kwargs"]["speculative_config"]["method"] = "medusa"
  with pytest.raises(ValueError, match=rf"{SPEC}.method='medusa' is not one of"):
    export.read_config("nemo_rl", cfg, **_given(job, plan, 0.75))


def test_hand_written_slime_flags_in_the_docs_shape_import_their_draft():
  job, plan, cluster, options = _plan("slime")
  settings = export.get("slime").to_config(plan, job, cluster, **options)
  # docs/en/advanced/speculative-decoding.md@624b824 lines 10-13 and 19
  flags = ["--sglang-speculative-algorithm", "STANDALONE", "--sglang-speculative-num-steps", "2",
           "--sglang-speculative-eagle-topk", "1", "--sglang-speculative-num-draft-tokens", "3",
           "--sglang-speculative-draft-model-path", "qwen2.5-0.5b"]
  hand = {**settings, "argv": settings["argv"] + flags}
  assert cli_checks.check_slime(hand) == []
  got = export.read_config("slime", hand, **_given(job, plan, 0.5)).plan.engine.speculative
  assert (got.kind, float(got.draft_tokens), got.draft_model) == ("draft", 2.0, DRAFT)
  tree = {**hand, "argv": [("4" if i == flags.index("1") + len(settings["argv"]) else a)
                           for i, a in enumerate(hand["argv"])]}
  with pytest.raises(ValueError, match=r"sglang-speculative-eagle-topk='4': tree drafting"):
    export.read_config("slime", tree, **_given(job, plan, 0.5))
  wrong = {**hand, "argv": settings["argv"] + [
      "4" if a == "3" else a for a in flags]}
  with pytest.raises(ValueError, match=r"num-draft-tokens='4' with num-steps='2'"):
    export.read_config("slime", wrong, **_given(job, plan, 0.5))


@pytest.mark.parametrize("framework, name", [("verl", "veRL"), ("openrlhf", "OpenRLHF"),
                                             ("areal", "AReaL")])
def test_frameworks_without_a_draft_setting_refuse_it_by_name(framework, name):
  job, plan, cluster, options = _plan(framework)
  drafted = plan.replace(engine=plan.engine.replace(
      speculative=cm.Speculative("ngram", draft_tokens=3.0, acceptance=0.6)))
  with pytest.raises(ValueError, match=rf"^{name}: engine.speculative.kind='ngram' has no "
                     r"setting.*passes no speculative settings.*NeMo-RL and slime"):
    export.get(framework).to_config(drafted, job, cluster, **options)


def test_estimate_cli_takes_the_acceptance_of_an_imported_draft(tmp_path, capsys):
  from search import estimate_cli  # pylint: disable=import-outside-toplevel
  spec = cm.Speculative("ngram", draft_tokens=3.0, acceptance=0.6)
  job, plan, cluster, options = _plan("nemo_rl", spec)
  path = tmp_path / "run.yaml"
  path.write_text(export.get("nemo_rl").render(export.to_nemo_rl(plan, job, cluster, **options)))
  argv = ["--from_nemo_rl", str(path), "--response_mean", "1500", "--model", job.actor.name]
  assert estimate_cli.call(argv) in (0, 1)
  assert "give --speculative_acceptance for this draft" in capsys.readouterr().out
  assert estimate_cli.call(argv + ["--speculative_acceptance", "0.6"]) in (0, 1)
  assert "speculative acceptance 0.6 per draft token" in capsys.readouterr().out
