"""Tests for the published-table and veRL-log readers."""

from importlib import resources
import json

import pytest

from costmodel._src.fit import published
from costmodel._src.fit.measurements import StageTimes
from costmodel._src.fit.measurements import published_table
from costmodel._src.fit.measurements import read_verl_log
from costmodel._src.fit.measurements import steady_state


def _packaged(filename):
    return resources.files("costmodel") / "data" / filename


def _write(tmp_path, filename, text):
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(*objects):
    return "".join(json.dumps(o) + "\n" for o in objects)


# ---------------------------------------------------------------------------
# Published tables.


@pytest.mark.parametrize(
    "name, filename, n_rows",
    [
        ("rl", "published_rl.csv", 40),
        ("training_inference", "published_training_inference.csv", 47),
        ("moe_fp8", "published_moe_fp8.csv", 39),
        ("rl_more", "published_rl_more.csv", 28),
    ],
)
def test_published_table_rows_and_columns(name, filename, n_rows):
    rows = published_table(name)
    lines = _packaged(filename).read_text(encoding="utf-8").splitlines()
    # No cell in these tables spans lines: one data row per non-header line.
    assert len(rows) == len([line for line in lines if line.strip()]) - 1
    assert len(rows) == n_rows
    header = lines[0].split(",")
    for row in rows:
        assert list(row) == header
        assert row["source"]
        assert row["metric"]
    assert len({row["id"] for row in rows}) == n_rows


def test_published_table_values_are_text():
    row = published_table("rl")[0]
    assert row["id"] == "1"
    assert row["metric"] == "mean step time"
    assert float(row["value"]) == pytest.approx(790.1)
    assert row["unit"] == "s"


def test_published_table_unknown_name():
    known = r"\['moe_fp8', 'rl', 'rl_more', 'training_inference'\]"
    with pytest.raises(ValueError, match=r"'sft'.*" + known):
        published_table("sft")


def test_parse_table_missing_column():
    with pytest.raises(ValueError, match=r"t\.csv line 1: missing column 'value'"):
        published._parse_table(
            "id,metric\n1,x\n", "t.csv", ("id", "metric", "value")
        )


def test_parse_table_unexpected_column_and_ragged_row():
    with pytest.raises(ValueError, match="unexpected column 'extra'"):
        published._parse_table("id,extra\n1,x\n", "t.csv", ("id",))
    with pytest.raises(ValueError, match="t.csv line 3: row has 1 fields"):
        published._parse_table("id,v\n1,x\n2\n", "t.csv", ("id", "v"))


# ---------------------------------------------------------------------------
# StageTimes.


def test_stage_times_is_frozen_and_canonical():
    record = StageTimes(step=3, times_s={"step": 10, "gen": 4.5})
    assert list(record.times_s) == ["gen", "step"]
    assert record.times_s["step"] == 10.0
    assert record == StageTimes(3, {"gen": 4.5, "step": 10.0})
    assert hash(record) == hash(StageTimes(3, {"gen": 4.5, "step": 10.0}))
    with pytest.raises(AttributeError):
        record.step = 4
    with pytest.raises(TypeError):
        record.times_s["gen"] = 1.0


@pytest.mark.parametrize(
    "step, times_s, message",
    [
        (-1, {"gen": 1.0}, "step=-1"),
        (1.5, {"gen": 1.0}, "step=1.5"),
        (1, {"generate": 1.0}, "'generate'"),
        (1, {"gen": -1.0}, r"times_s\['gen'\]=-1.0"),
        (1, {"gen": float("nan")}, r"times_s\['gen'\]=nan"),
    ],
)
def test_stage_times_validation(step, times_s, message):
    with pytest.raises(ValueError, match=message):
        StageTimes(step, times_s)


# ---------------------------------------------------------------------------
# read_verl_log: well-formed input.


def test_read_jsonl_flat(tmp_path):
    path = _write(
        tmp_path,
        "run.jsonl",
        _jsonl(
            {"val-core/acc/mean@1": 0.7, "step": 0},
            {
                "step": 1,
                "timing_s/gen": 150.0,
                "timing_s/ref": 25.0,
                "timing_s/old_log_prob": 30.0,
                "timing_s/values": 20.0,
                "timing_s/reward": 3.0,
                "timing_s/adv": 0.5,
                "timing_s/update_actor": 90.0,
                "timing_s/update_critic": 60.0,
                "timing_s/update_weights": 8.0,
                "timing_s/step": 390.0,
                "timing_s/testing": 12.0,
                "actor/entropy": 0.6,
            },
        )
        + "\n"
        + _jsonl(
            {"training/global_step": 2, "timing_s/gen": 140, "timing_s/reshard": 7}
        ),
    )
    records = read_verl_log(path)
    assert records == [
        StageTimes(
            1,
            {
                "gen": 150.0,
                "ref": 25.0,
                "old_log_prob": 30.0,
                "values": 20.0,
                "reward": 3.0,
                "adv": 0.5,
                "update_actor": 90.0,
                "update_critic": 60.0,
                "update_weights": 8.0,
                "step": 390.0,
            },
        ),
        StageTimes(2, {"gen": 140.0, "update_weights": 7.0}),
    ]


def test_read_jsonl_nested_data(tmp_path):
    path = _write(
        tmp_path,
        "run.jsonl",
        _jsonl(
            {"step": 0, "data": {"val-core/acc/mean@1": 0.7}},
            {"step": 2, "data": {"timing_s/gen": 149.0, "timing_s/sync_weights": 8.5}},
            {"step": 1, "data": {"timing_s/gen": 180.0, "timing_s/step": 260.0}},
            {"data": {"_step": 3, "timing_s/gen": 151.0, "timing_s/ref": None}},
        ),
    )
    assert read_verl_log(str(path)) == [
        StageTimes(1, {"gen": 180.0, "step": 260.0}),
        StageTimes(2, {"gen": 149.0, "update_weights": 8.5}),
        StageTimes(3, {"gen": 151.0}),
    ]


def test_read_csv_with_missing_cells(tmp_path):
    path = _write(
        tmp_path,
        "run.csv",
        "training/global_step,timing_s/gen,timing_s/update_actor,timing_s/step,actor/entropy\n"
        "1,180.5,100,290,0.6\n"
        "2,150,,250.25,0.59\n"
        "3,,,,0.58\n"
        "\n"
        "4,149,91,248,\n",
    )
    assert read_verl_log(path) == [
        StageTimes(1, {"gen": 180.5, "update_actor": 100.0, "step": 290.0}),
        StageTimes(2, {"gen": 150.0, "step": 250.25}),
        StageTimes(4, {"gen": 149.0, "update_actor": 91.0, "step": 248.0}),
    ]


def test_read_csv_wandb_prefixed_columns(tmp_path):
    path = _write(
        tmp_path,
        "export.csv",
        '"Step","grpo-7b - timing_s/gen","grpo-7b - timing_s/gen__MIN",'
        '"grpo-7b - timing_s/update_weights"\n'
        '"0","151.5","151.5","8.25"\n'
        '"1","149.0","149.0",""\n',
    )
    assert read_verl_log(path) == [
        StageTimes(0, {"gen": 151.5, "update_weights": 8.25}),
        StageTimes(1, {"gen": 149.0}),
    ]


@pytest.mark.parametrize(
    "filename, text",
    [
        ("metrics.log", _jsonl({"step": 1, "timing_s/gen": 5.0})),
        ("metrics.txt", "_step,timing_s/gen\n1,5.0\n"),
        ("metrics", "\n" + _jsonl({"step": 1, "data": {"timing_s/gen": 5}})),
    ],
)
def test_read_detects_format_from_content(tmp_path, filename, text):
    assert read_verl_log(_write(tmp_path, filename, text)) == [
        StageTimes(1, {"gen": 5.0})
    ]


def test_read_example_log():
    path = _packaged("example_verl_log.jsonl")
    records = read_verl_log(path)
    assert [r.step for r in records] == list(range(1, 13))
    medians = steady_state(records, skip=1)
    assert medians["gen"] == pytest.approx(150.0, rel=0.05)
    assert medians["update_actor"] == pytest.approx(90.0, rel=0.05)
    assert records[0].times_s["step"] > 1.2 * medians["step"]  # Warm-up step.
    for r in records:
        stages = sum(v for k, v in r.times_s.items() if k != "step")
        assert stages < r.times_s["step"] < stages + 15.0


# ---------------------------------------------------------------------------
# read_verl_log: malformed input.


@pytest.mark.parametrize(
    "filename, text, message",
    [
        (
            "run.jsonl",
            _jsonl(
                {"step": 1, "timing_s/gen": 1.0}, {"step": 2, "timing_s/gen": "abc"}
            ),
            "run.jsonl line 2: field 'timing_s/gen' = 'abc' is not a number",
        ),
        (
            "run.jsonl",
            _jsonl({"step": 1, "timing_s/gen": 1.0}, {"step": 2, "timing_s/ref": -2.5}),
            "run.jsonl line 2: field 'timing_s/ref' = -2.5 is negative",
        ),
        (
            "run.jsonl",
            _jsonl({"step": 1, "data": {"timing_s/gen": True}}),
            "run.jsonl line 1: field 'timing_s/gen' = True is not a number",
        ),
        (
            "run.jsonl",
            _jsonl({"step": 1, "timing_s/gen": 1.0})
            + "\n"
            + '{"step": 3, "timing_s/gen": }\n',
            "run.jsonl line 3: not valid JSON",
        ),
        (
            "run.jsonl",
            _jsonl({"step": 1, "timing_s/gen": 1.0}, [1, 2]),
            "run.jsonl line 2: expected a JSON object",
        ),
        (
            "run.jsonl",
            _jsonl({"step": "two", "timing_s/gen": 1.0}),
            "run.jsonl line 1: field 'step' = 'two' is not a number",
        ),
        (
            "run.jsonl",
            _jsonl({"step": 1.5, "timing_s/gen": 1.0}),
            "run.jsonl line 1: field 'step' = 1.5 is not a non-negative integer",
        ),
        (
            "run.jsonl",
            _jsonl({"timing_s/gen": 1.0}),
            "run.jsonl line 1: no step counter; expected one of the fields",
        ),
        (
            "run.jsonl",
            _jsonl({"step": 1, "timing_s/gen": 1.0}, {"step": 1, "timing_s/gen": 2.0}),
            "run.jsonl line 2: field 'step' = 1 repeats the step of line 1",
        ),
        (
            "run.jsonl",
            _jsonl(
                {"step": 1, "timing_s/update_weights": 1.0, "timing_s/reshard": 2.0}
            ),
            "run.jsonl line 1: fields 'timing_s/update_weights' and 'timing_s/reshard'",
        ),
        (
            "run.csv",
            "step,timing_s/gen\n1,2.0\n2,abc\n",
            "run.csv line 3: field 'timing_s/gen' = 'abc' is not a number",
        ),
        (
            "run.csv",
            "step,timing_s/gen\n1,2.0\n2,-1\n",
            "run.csv line 3: field 'timing_s/gen' = '-1' is negative",
        ),
        (
            "run.csv",
            "step,timing_s/gen\n1,inf\n",
            "run.csv line 2: field 'timing_s/gen' = 'inf' is not finite",
        ),
        (
            "run.csv",
            "step,timing_s/gen\n1,2.0\n2,3.0,4.0\n",
            "run.csv line 3: row has 3 fields, header has 2",
        ),
        (
            "run.csv",
            "step,timing_s/gen\n1,2.0\nx,3.0\n",
            "run.csv line 3: field 'step' = 'x' is not a number",
        ),
        (
            "run.csv",
            "a - timing_s/gen,b - timing_s/gen,_step\n1,2,3\n",
            "run.csv line 1: columns 'a - timing_s/gen' and 'b - timing_s/gen'",
        ),
        (
            "run.csv",
            "timing_s/gen\n1.0\n",
            "run.csv line 1: no step column",
        ),
    ],
)
def test_read_malformed(tmp_path, filename, text, message):
    path = _write(tmp_path, filename, text)
    with pytest.raises(ValueError) as info:
        read_verl_log(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_read_no_timing_keys(tmp_path):
    for filename, text in [
        ("run.jsonl", _jsonl({"step": 1, "actor/entropy": 0.5})),
        ("run.csv", "step,actor/entropy\n1,0.5\n"),
        ("run.csv", "step,timing_s/gen\n1,\n"),
    ]:
        path = _write(tmp_path, filename, text)
        with pytest.raises(ValueError, match="expected one of") as info:
            read_verl_log(path)
        assert "timing_s/gen" in str(info.value)
        assert "timing_s/update_weights" in str(info.value)


@pytest.mark.parametrize("filename", ["run.jsonl", "run.csv", "run"])
def test_read_empty_file(tmp_path, filename):
    path = _write(tmp_path, filename, "\n  \n")
    with pytest.raises(ValueError, match="file is empty"):
        read_verl_log(path)


# ---------------------------------------------------------------------------
# steady_state.


def test_steady_state_medians_by_hand():
    records = [
        StageTimes(3, {"gen": 10.0, "update_actor": 7.0}),
        StageTimes(1, {"gen": 100.0, "update_actor": 50.0, "step": 200.0}),
        StageTimes(2, {"gen": 12.0, "update_actor": 5.0, "step": 30.0}),
        StageTimes(4, {"gen": 11.0, "update_actor": 6.0, "step": 31.0}),
        StageTimes(5, {"gen": 20.0, "update_actor": 8.0, "step": 40.0}),
    ]
    # After dropping step 1: gen (10, 11, 12, 20) -> 11.5; update_actor
    # (5, 6, 7, 8) -> 6.5; step present in steps 2, 4, 5: (30, 31, 40) -> 31.
    assert steady_state(records) == {"gen": 11.5, "update_actor": 6.5, "step": 31.0}
    # Without skipping: gen (10, 11, 12, 20, 100) -> 12; step (30, 31, 40, 200) -> 35.5.
    assert steady_state(records, skip=0) == {
        "gen": 12.0,
        "update_actor": 7.0,
        "step": 35.5,
    }
    # Skipping three: steps 4 and 5 only.
    assert steady_state(records, skip=3) == {
        "gen": 15.5,
        "update_actor": 7.0,
        "step": 35.5,
    }


def test_steady_state_errors():
    records = [StageTimes(1, {"gen": 1.0}), StageTimes(2, {"gen": 2.0})]
    with pytest.raises(ValueError, match="skip=2 leaves no records"):
        steady_state(records, skip=2)
    with pytest.raises(ValueError, match="skip=1 leaves no records"):
        steady_state([])
    with pytest.raises(ValueError, match="skip=-1"):
        steady_state(records, skip=-1)
    with pytest.raises(ValueError, match=r"records\[1\]"):
        steady_state([records[0], {"gen": 2.0}], skip=0)
