"""The long-answer lab (cpu_lab/long_answers.py): 3-6 operations, worked solutions of 60-120 lab-tokenizer tokens that
are correct step by step, splits that share no question, and a 2-step run of each config that writes the length keys
the report and the plot read.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_long_answers.py
"""

import random
import re
from collections import Counter
from dataclasses import replace

import pytest

from cpu_lab import long_answers
from cpu_lab.long_answers import CONFIGS, WARMSTART, LongDifficulty
from cpu_lab.problems import Difficulty, dev_problems, heldout_problems, solution, train_problems
from cpu_lab.warmstart import WarmStartSettings, lab_tokenizer
from rewards.answers import extract_answer
from rewards.verify import is_correct

STEP = re.compile(r"^(\w+) (buys|finds|gets|is given|gives away|loses|sells|uses) (\d+): (\d+) ([+-]) (\d+) = (\d+)\.$")
GAINS = {"buys", "finds", "gets", "is given"}


@pytest.fixture(scope="module")
def sample():
    """Every held-out and validation problem, and 600 training problems, of the long lab."""
    difficulty = WARMSTART.difficulty
    return heldout_problems(difficulty) + dev_problems(difficulty) + train_problems(600, 0, difficulty)


def test_solutions_take_60_to_120_tokens_of_the_lab_tokenizer(sample):
    tokenizer = lab_tokenizer(WARMSTART)  # the tokenizer the warm start trains with
    lengths = {}
    for problem in sample:
        operations = problem["answer"].count("\n") - 2  # the opening line, one per operation, the closing line
        lengths.setdefault(operations, []).append(len(tokenizer(problem["answer"])["input_ids"]))
    assert sorted(lengths) == [3, 4, 5, 6]
    assert min(lengths[3]) >= 60 and max(lengths[6]) <= 120, {k: (min(v), max(v)) for k, v in lengths.items()}
    # and the budget of both configs leaves room past the longest solution, so rambling is possible and truncates
    assert max(max(v) for v in lengths.values()) < 160


def test_solutions_are_correct_step_by_step_and_follow_the_question(sample):
    for problem in sample:
        opening, *steps, closing, last = problem["answer"].split("\n")
        name, start = re.match(r"^(\w+) starts with (\d+) \w+\.$", opening).groups()
        assert 3 <= len(steps) <= 6
        running = int(start)
        sentences = problem["question"].split(". ")[1:]  # the question's operations, in order
        for line, sentence in zip(steps, sentences, strict=False):
            who, verb, amount, a, op, b, result = STEP.match(line).groups()
            assert who == name and int(a) == running and amount == b  # continues from the previous result
            assert (op == "+") == (verb in GAINS) and f" {amount} " in f" {sentence} "
            running = int(a) + int(b) if op == "+" else int(a) - int(b)
            assert int(result) == running and 0 <= running <= LongDifficulty().max_total
            assert 1 <= int(amount) <= LongDifficulty().max_number
        assert closing == f"So {name} has {running} {closing.split()[-2]} now." and last == f"#### {running}"
        assert problem["final"] == str(running)
        assert extract_answer(problem["answer"], "gsm8k").value == problem["final"]  # the one extractor reads it
        assert is_correct(problem["answer"], problem["final"], "gsm8k")


def test_every_operation_count_and_both_signs_occur(sample):
    operations = Counter(p["answer"].count("\n") - 2 for p in sample)
    assert set(operations) == {3, 4, 5, 6} and min(operations.values()) > len(sample) / 10  # roughly uniform
    assert any(" + " in p["answer"] for p in sample) and any(" - " in p["answer"] for p in sample)


def test_splits_share_no_solution_and_are_deterministic():
    difficulty = LongDifficulty()
    held = {solution(p) for p in heldout_problems(difficulty)}
    validation = {solution(p) for p in dev_problems(difficulty)}
    train = {solution(p) for p in train_problems(2000, 1, difficulty)}
    assert len(held) == 200 and len(validation) == 200 and not held & validation and not train & (held | validation)
    assert train_problems(5, 1, difficulty) == train_problems(5, 1, difficulty)
    assert train_problems(5, 1, difficulty) != train_problems(5, 2, difficulty)


def test_the_warm_start_is_cached_apart_from_the_short_lab():
    # the generator is part of the settings hash: a plain Difficulty with the same numbers is another warm start
    short_same_numbers = replace(WARMSTART, difficulty=Difficulty(min_steps=3, max_steps=6, max_number=9))
    assert len({WARMSTART.key(), WarmStartSettings().key(), short_same_numbers.key()}) == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_total": 9}, "max_total > max_number"),  # totals could not grow past one amount
        ({"min_steps": 7}, "1 <= min_steps <= max_steps"),  # the base class's check still runs
    ],
)
def test_bad_difficulty_is_refused_with_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        LongDifficulty(**kwargs)


@pytest.mark.heavy  # builds a model
def test_two_steps_of_each_config_write_the_length_keys_the_report_plots(tmp_path, monkeypatch):
    from cpu_lab.matrix import run_matrix
    from cpu_lab.warmstart import prepare_lab, recipe_flags
    from eval.jsonl import read_jsonl
    from tests.cpu_lab.test_cpu_lab_warmstart import TINY

    monkeypatch.chdir(tmp_path)  # the configs' output folders are relative; keep them here
    settings = WarmStartSettings(
        **TINY,
        difficulty=LongDifficulty(),
        max_steps=2,
        eval_every=2,
        validation_n=2,
        heldout_n=2,
        stop_at_accuracy=1.0,
    )  # seconds: untrained, but long data
    paths = prepare_lab(settings, tmp_path / "cache", root=tmp_path / "lab_long")
    extra = [
        *recipe_flags(paths, model="link"),
        "--max_steps",
        "2",
        "--eval_limit",
        "2",
        "--probe_problems",
        "0",
        "--max_completion_length",
        "12",
        "--eval_max_new_tokens",
        "12",  # an untrained model rambles: all cut
        "--per_device_train_batch_size",
        "16",
    ]  # 2 prompts x G=8 per step
    run_matrix([str(c) for c in CONFIGS], [0], tmp_path / "matrix", extra)
    for config in CONFIGS:
        log = read_jsonl(tmp_path / "matrix" / config.stem / "seed0" / "log.jsonl")
        steps = [row for row in log if "monitor/truncated_rate" in row]
        assert [row["step"] for row in steps] == [1, 2]  # logging_steps 1: a point per step
        assert all(set(long_answers.LENGTH_KEYS.values()) <= set(row) for row in steps)
        assert all(0.0 <= row["monitor/truncated_rate"] <= 1.0 for row in steps)
        curves = long_answers.length_curves(tmp_path / "matrix" / config.stem / "seed0")
        assert [step for step, _ in curves["truncated_rate"]] == [1, 2]
        assert all(value == 12.0 for _, value in curves["truncated"])  # a cut answer is as long as the budget
        assert all(1.0 <= value <= 12.0 for _, value in curves["wrong"] + curves["correct"])
        # at most 12 tokens against solutions of at least 60: every greedy answer falls short of its gold solution
        excess = long_answers.excess_tokens(tmp_path / "matrix" / config.stem / "seed0", "after")
        assert excess["wrong"] is not None and excess["wrong"] <= 12 - 60
    report = long_answers.write_report(tmp_path / "matrix")
    text = report.read_text()
    assert all(c.stem in text for c in CONFIGS) and "(1 seed) → " in text
    assert (tmp_path / "matrix" / "lengths.png").stat().st_size > 10_000


def test_report_without_runs_names_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `run` first"):
        long_answers.write_report(tmp_path)


def test_the_generator_is_deterministic_for_a_seed():
    assert LongDifficulty().make_problem(random.Random(5)) == LongDifficulty().make_problem(random.Random(5))
