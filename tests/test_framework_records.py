"""One record per framework: its folder, its one pin, and the readers that agree with it."""

import pathlib
import re

import pytest

import export
from search._src import frameworks as fw_lib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The code that states framework versions: the framework wing, the search, the tools and
# the rule table's sources (costmodel/_src/fit cites published measurements at the
# commits they were published at, which are sources, not pins).
CODE = [p for d in ("export", "search", "tools", "costmodel/_src/specs")
        for p in sorted((ROOT / d).rglob("*.py"))]


def _agrees(commit: str, pin: str) -> bool:
  return commit.startswith(pin) or pin.startswith(commit)


def test_every_framework_folder_is_registered_and_every_record_is_a_folder():
  folders = {p.parent.name for p in (ROOT / "export").glob("*/record.py")} - {"_src"}
  assert folders == set(export.FRAMEWORKS)
  for name, r in export.RECORDS.items():
    assert r.name == name == r.exporter.name and r.exporter.version == r.pin
    assert r.importer.__name__ == f"export.{name}.importer"


@pytest.mark.parametrize("name", export.FRAMEWORKS)
def test_exactly_one_pin_per_framework_in_the_code(name):
  r = export.record(name)
  repo = r.pin.split("@", 1)[0]
  literal = [p for p in CODE if f'"{r.pin}"' in p.read_text(encoding="utf-8")]
  assert literal == [ROOT / "export" / name / "record.py"], literal
  stated = []
  for p in CODE:
    text = p.read_text(encoding="utf-8")
    stated += [(p.name, c) for c in re.findall(rf"{re.escape(repo)}@([0-9a-f]{{7,40}})\b", text)]
    if p.parent.name == name:  # the folder's own citations name the pinned commit
      stated += [(p.name, c) for c in re.findall(r"@([0-9a-f]{7,40})\b", text)]
    if p.name == "rule_table.py":  # the rule sources: "veRL: path @commit"
      stated += [(p.name, c) for c in re.findall(
          rf"\"{re.escape(r.framework)}: [^\"]*?@([0-9a-f]{{7,40}})\b", text)]
  wrong = [(f, c) for f, c in stated if not _agrees(c, r.commit)]
  assert stated and not wrong, f"{name} pinned at {r.commit}: {wrong}"


def test_a_record_whose_exporter_follows_another_pin_is_refused():
  r = export.record("verl")
  with pytest.raises(ValueError, match=r"its exporter is 'verl' at 'verl-project/verl@1dda039'"):
    export.Record(name=r.name, framework=r.framework, pin="verl-project/verl@0000000",
                  exporter=r.exporter, importer=r.importer, search=r.search,
                  from_help=r.from_help)


def test_the_search_the_command_line_and_the_importer_read_the_records():
  assert fw_lib.NAMES == ("any", *export.FRAMEWORKS)
  for name, r in export.RECORDS.items():
    space = fw_lib.get(name)
    assert (space.families, space.rule_sets, space.ties) == (
        r.search.families, r.search.rule_sets, r.search.ties)
  from search._src import cli  # pylint: disable=import-outside-toplevel
  assert set(cli.FROM) == set(export.FRAMEWORKS)
  # a veRL run that states no rollout engine settings runs the record's defaults
  words = ["data.train_batch_size=64", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
           "actor_rollout_ref.model.path=Qwen/Qwen3-8B", "trainer.n_gpus_per_node=8"]
  e = export.read_config("verl", words, response_mean=500).plan.engine
  d = export.record("verl").engine_defaults
  assert (float(e.tp), float(e.memory_fraction), float(e.max_seqs)) == (
      d.tp, d.memory_fraction, d.max_seqs)
