"""The labs' shared report pieces (cpu_lab/report.py): how a number, a spread, an interval, a table and a command are
written in every lab's report.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_lab_report.py
"""

import json
import statistics

import pytest

from cpu_lab import report
from cpu_lab.runner import planned_steps
from eval.jsonl import write_jsonl


def test_number_writes_the_format_or_the_missing_mark():
    assert report.number(0.12345) == "0.123" and report.number(2.0, ".0f") == "2"
    assert report.number(None) == "–" and report.number(None, ".3g", "-") == "-"
    assert report.number(0.0) == "0.000"  # zero is a value, not a missing one


def test_mean_std_leaves_out_missing_values_and_has_no_spread_for_one():
    assert report.mean_std([0.5, None, 0.7]) == pytest.approx((0.6, statistics.stdev([0.5, 0.7]), 2))
    assert report.mean_std([0.5, None]) == (0.5, None, 1)
    assert report.mean_std([None]) == (None, None, 0)


def test_mean_std_text_for_many_one_and_no_values():
    assert report.mean_std_text([0.5, 0.6]) == f"0.550 ± {statistics.stdev([0.5, 0.6]):.3f}"
    assert report.mean_std_text([0.5, 0.6], ".1f") == "0.6 ± 0.1"
    assert report.mean_std_text([3.0]) == "3.000 (1 seed)" and report.mean_std_text([3.0], one="") == "3.000"
    assert report.mean_std_text([None, None]) == "–"
    # a signed mean keeps its sign; the spread, never negative, is written without one
    assert report.mean_std_text([-5.0, -15.0], "+.1f") == f"-10.0 ± {statistics.stdev([-5.0, -15.0]):.1f}"


def test_interval_and_gain_in_points():
    assert report.interval(0.25, [0.1, 0.4]) == "0.250 [0.100, 0.400]"
    assert report.gain_points({"difference": -0.05, "ci": [-0.125, 0.025]}) == "-5.0 [-12.5, +2.5]"
    assert report.gain_points(None) == "–"
    assert report.accuracy({"accuracy": 0.5, "ci": [0.4, 0.6]}) == "0.500 [0.400, 0.600]"
    assert report.accuracy(None) == "–"


def test_paired_gain_reads_both_evaluations_of_a_run(tmp_path):
    assert report.paired_gain(tmp_path) is None  # no evaluations: no gain
    before = [{"index": i, "correct": i < 10, "completion": "#### 1"} for i in range(40)]
    after = [{"index": i, "correct": i < 18, "completion": "#### 1"} for i in range(40)]
    write_jsonl(before, tmp_path / "eval_before" / "samples.jsonl")
    write_jsonl(after, tmp_path / "eval_after" / "samples.jsonl")
    gain = report.paired_gain(tmp_path)
    assert gain["difference"] == pytest.approx(0.2)
    low, high = gain["ci"]
    assert 0 < low <= 0.2 <= high  # eight problems turned right, none wrong: the paired interval excludes 0


def test_table_has_a_header_rule_and_a_row_per_item():
    text = report.table(["a", "b"], [[1, "x"], ["", None]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | x |", "|  | None |"]
    assert report.table(["a"], []) == "| a |\n|---|"


def test_mean_by_step_averages_the_seeds_that_logged_each_step():
    steps, means = report.mean_by_step([[(2, 1.0), (1, 4.0)], [(2, 3.0)], []])
    assert steps == [1, 2] and means == [4.0, 2.0]


def test_recipe_command_names_the_recipe_of_the_config_and_quotes_what_needs_it():
    command = report.recipe_command("recipes/configs/lab/grpo_lab_default.yaml", 3, "runs/a b", ["--x", "1"])
    assert command == (
        "python -m recipes.grpo --config recipes/configs/lab/grpo_lab_default.yaml --seed 3 "
        "--output_dir 'runs/a b' --x 1"
    )
    assert report.reproduce(["cmd"]) == ["## Reproduce", "", "```", "cmd", "```"]


def test_save_figure_and_write_markdown_make_their_folders_and_files(tmp_path):
    fig, ax = report.pyplot().subplots()
    ax.plot([0, 1], [0, 1])
    png = report.save_figure(fig, tmp_path / "plots" / "line.png")
    assert png.stat().st_size > 0 and not report.pyplot().get_fignums()  # written and closed
    md = report.write_markdown(tmp_path / "r.md", ["# t", "", "x"])
    assert md.read_text() == "# t\n\nx\n"


@pytest.mark.parametrize(
    "flags, steps",
    [
        (["--max_steps", "7"], 7),
        (["--max_steps=7", "--max_steps", "9"], 9),  # the last one given, as argparse reads it
        (["--max_steps", "9", "--max_steps"], 9),  # a flag with no value sets nothing
        (["--max_steps", "x"], None),
    ],
)
def test_planned_steps_reads_the_flag_before_the_config(tmp_path, flags, steps):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"max_steps": 5}))
    assert planned_steps(config, flags) == steps
    assert planned_steps(config, []) == 5
