"""Sources of the validation cases and leave-one-source-out validation.

Out-of-source validation holds out every case of one document (a framework's
doc, a paper, a repository's table, an issue thread), fits the parameters on
the others and predicts it; these tests check that the source keys group the
packaged rows as their documents do and that a held-out source's own figures
never reach its out-of-source prediction.
"""

import dataclasses

import pytest

import costmodel as cm
from costmodel import validation
from costmodel._src.fit.validation import sources

FULLY_ASYNC = "volcengine/verl:verl/experimental/fully_async_policy/README.md"


@pytest.mark.parametrize("raw, key", [
    ("github NVIDIA/Megatron-LM images/cases_april2021.png and README.md at commit 50a4b5f",
     "NVIDIA/Megatron-LM"),
    ("https://github.com/NVIDIA/nccl-tests/issues/212 (maintainer sjeaugey)",
     "NVIDIA/nccl-tests#212"),
    ("alibaba/Pai-Megatron-Patch issue #658 (commit 2b201af)", "alibaba/Pai-Megatron-Patch#658"),
    ("volcengine/verl:docs/advance/one_step_off.md",
     "volcengine/verl:docs/advance/one_step_off.md"),
    ("volcengine/verl:docs/perf/dpsk.md + examples/grpo_trainer/run.sh",
     "volcengine/verl:docs/perf/dpsk.md"),
    # The fully-async README moved to docs/advance/fully_async.md: one source.
    ("verl-project/verl:docs/advance/fully_async.md", FULLY_ASYNC),
    ("arXiv 2409.19256 abstract", "arXiv 2409.19256"),
    ("Korthikanti et al. arXiv:2205.05198 abstract (ar5iv)", "calculon-ai/calculon"),
])
def test_normalize_names_the_document(raw, key):
  assert sources.normalize(raw) == key


@pytest.mark.parametrize("raw", ["", "  ", "same"])
def test_normalize_refuses_an_empty_source(raw):
  with pytest.raises(ValueError, match="source="):
    sources.normalize(raw)


def test_source_of_rows():
  # rl:1-13 and the ablations N1-N9 come from the same veRL document.
  assert validation.source_of("rl:1") == validation.source_of("rl_more:N5") == FULLY_ASYNC
  assert validation.source_of("rl:14") == "volcengine/verl:docs/advance/one_step_off.md"
  assert validation.source_of("rl:100").startswith("deepspeedai/DeepSpeedExamples")
  # N17 and N16 say "same": the row above's source.
  assert validation.source_of("rl_more:N16") == validation.source_of("rl_more:N15")
  assert validation.source_of("N27:7b") == "verl-project/verl:docs/perf/device_tuning.rst"
  with pytest.raises(ValueError, match="row_id='bogus:1'"):
    validation.source_of("bogus:1")
  with pytest.raises(ValueError, match="no row '999'"):
    validation.source_of("rl:999")


def test_every_non_rl_case_has_a_source():
  cases = validation.cases(["training", "memory", "kernel", "decode", "collective", "moe",
                            "fp8", "rl_sync", "feasibility"])
  keys = {validation.source_of(c.row_id) for c in cases}
  assert {"calculon-ai/calculon", "NVIDIA/Megatron-LM", "deepseek-ai/DeepGEMM",
          "microsoft/vidur"} <= keys
  assert len(keys) >= 12


def _case(row_id, group, label):
  return cm.validation.Case(row_id, group, label, 1.0, "s", lambda eff: eff.infer_overhead_s)


def test_stage_kind_follows_the_timer():
  kind = validation.stage_kind
  assert kind(_case("rl:1", "rl_stage", "veRL run: gen")) == "generation"
  assert kind(_case("rl:1", "rl_stage", "veRL run: old_log_prob")) == "log-prob"
  assert kind(_case("rl:1", "rl_stage", "veRL run: update_actor")) == "update"
  assert kind(_case("rl:1", "rl_step", "veRL run")) == "step"
  assert kind(_case("rl:12", "rl_sync", "veRL bucketed sync")) == "sync"
  assert kind(_case("training_inference:1", "training", "GPT")) == "training"
  assert set(validation.STAGE_KINDS) == {"generation", "log-prob", "update", "sync"}


def _scaled(row_id, published, scale):
  """A case predicting ``scale x infer_overhead_s`` (0.5 s by default)."""
  return cm.validation.Case(row_id, "rl_step", row_id, published, "s",
                 lambda eff, k=scale: k * eff.infer_overhead_s)


def test_a_held_out_source_never_sees_its_own_figures():
  # Source A (veRL's one-step-off doc) wants infer_overhead_s = 2 s; source B
  # (the DeepSeek-V3 doc) agrees with the default 0.5 s.
  a = [_scaled("rl:14", 2.0 * k, k) for k in (1.0, 2.0)]
  b = [_scaled("rl:18", 0.5 * k, k) for k in (1.0, 3.0)]
  v = cm.validation.validate_by_source(a + b, fields=("infer_overhead_s",), steps=150,
                            learning_rate=0.1, prior=0.0, loss="squared", weighting="case")
  assert len(v.sources()) == 2
  rows = {(r.source, r.published): r for r in v.rows}
  for r in v.rows:
    if r.row_id == "rl:14":
      # Fitted on B alone: the default is right there, so A comes out 4x too fast.
      assert r.error_out_of_source == pytest.approx(-0.75, abs=0.02)
    else:
      # Fitted on A alone: 2 s, so B comes out 4x too slow.
      assert r.error_out_of_source == pytest.approx(3.0, rel=0.03)
    assert r.error_default == pytest.approx(-0.75 if r.row_id == "rl:14" else 0.0, abs=1e-6)
  # In sample (fitted on both) lies between: A too fast, B too slow.
  assert all(r.error_in_sample < 0 for r in v.rows if r.row_id == "rl:14")
  assert all(r.error_in_sample > 0 for r in v.rows if r.row_id == "rl:18")
  assert len(rows) == 4
  held = v.held_out["volcengine/verl:docs/advance/one_step_off.md"]
  assert float(held.infer_overhead_s) == pytest.approx(0.5, rel=0.02)
  assert dataclasses.replace(held, infer_overhead_s=0.5) == dataclasses.replace(
      v.initial, infer_overhead_s=0.5)


def test_leaving_one_source_out_needs_two_sources():
  with pytest.raises(ValueError, match="two or more sources"):
    cm.validation.validate_by_source([_scaled("rl:14", 1.0, 1.0), _scaled("rl:15", 2.0, 2.0)],
                          fields=("infer_overhead_s",), steps=1)
  with pytest.raises(ValueError, match="field='nope'"):
    cm.validation.validate_by_source([_scaled("rl:14", 1.0, 1.0)], fields=("nope",), steps=1)
  with pytest.raises(ValueError, match="published=-1"):
    cm.validation.validate_by_source([_scaled("rl:14", -1.0, 1.0)], fields=("infer_overhead_s",), steps=1)
