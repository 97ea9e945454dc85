"""The lab's problem generator: deterministic per seed, correct worked solutions, a held-out set kept out of training.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_lab_problems.py
"""

import random
import re

import pytest

from lab.problems import Difficulty, heldout_problems, make_problem, train_problems, write_lab_data
from rewards.answers import extract_answer
from rewards.verify import is_correct

EQUATION = re.compile(r"^(\d+) ([+-]) (\d+) = (\d+)$")


@pytest.mark.parametrize(
    "difficulty",
    [
        Difficulty(),  # the lab's default: 1-2 operations, numbers up to 50
        Difficulty(min_steps=3, max_steps=4, max_number=999),  # harder: more steps, bigger numbers
        Difficulty(min_steps=1, max_steps=1, max_number=2),  # smallest: one operation on 1 or 2
    ],
)
def test_solutions_are_correct_and_end_with_the_final_answer(difficulty):
    for problem in train_problems(300, seed=7, difficulty=difficulty):
        *steps, last = problem["answer"].split("\n")
        assert difficulty.min_steps <= len(steps) <= difficulty.max_steps
        running = None
        for line in steps:  # every step is a true equation that continues from the previous result
            a, op, b, c = EQUATION.match(line).groups()
            assert int(c) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
            assert running is None or int(a) == running
            assert int(b) <= difficulty.max_number
            running = int(c)
        assert last == f"#### {running}" and problem["final"] == str(running)
        # the one extractor and the checker the rewards use agree with the generator
        assert extract_answer(problem["answer"]).value == problem["final"]
        assert is_correct(problem["answer"], problem["final"], "gsm8k")


def test_generation_is_deterministic_per_seed():
    assert train_problems(50, seed=3) == train_problems(50, seed=3)
    assert train_problems(50, seed=3) != train_problems(50, seed=4)
    assert make_problem(random.Random(0)) == make_problem(random.Random(0))


def test_heldout_is_fixed_distinct_and_disjoint_from_training():
    held = heldout_problems()
    assert held == heldout_problems() and len(held) == 200
    questions = {p["question"] for p in held}
    assert len(questions) == 200  # no duplicates inside the held-out set
    for seed in (0, 1, 2):
        assert not questions & {p["question"] for p in train_problems(5000, seed=seed)}


def test_bad_settings_fail_with_a_fix():
    with pytest.raises(ValueError, match="raise max_steps"):
        Difficulty(min_steps=3, max_steps=2)
    with pytest.raises(ValueError, match="held-out set's seed"):
        train_problems(10, seed=1_000_003)
    with pytest.raises(ValueError, match="distinct problems"):
        heldout_problems(Difficulty(min_steps=1, max_steps=1, max_number=2), n=5000)  # 3,920 stories exist


@pytest.mark.parametrize("task_name", ["lab", "gsm8k_train"])  # the lab's prompt; GSM8K's reads them as well
def test_written_files_load_as_a_gsm8k_shaped_task(tmp_path, task_name):
    from eval.tasks import get_task, load_rows, to_prompt_rows

    train, heldout = write_lab_data(tmp_path, n_train=20)
    rows = to_prompt_rows(get_task(task_name), load_rows(get_task(task_name), str(train)))
    assert len(rows) == 20 and rows[0]["answer"] == train_problems(20)[0]["final"]
    assert len(load_rows(get_task(task_name), str(heldout))) == 200


def test_lab_task_has_no_hub_copy():
    from eval.tasks import get_task, load_rows

    with pytest.raises(ValueError, match="no hub copy: pass --data"):
        load_rows(get_task("lab"))
