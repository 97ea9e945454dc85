"""The lab's problem generator: deterministic per seed, correct worked solutions, three splits that share no question.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/labs/test_cpu_lab_problems.py
"""

import random
import re

import pytest

from cpu_lab.problems import (
    HELDOUT_SIZE,
    Difficulty,
    heldout_problems,
    make_problem,
    train_problems,
    validation_problems,
    write_lab_data,
)
from eval.jsonl import read_jsonl
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


# A story space small enough (~20k one-step stories) that 5,000 training draws WOULD hit the held-out and validation
# questions dozens of times if the generator did not leave them out; at the default difficulty collisions are too rare
# for a test to notice a missing exclusion.
CROWDED = Difficulty(min_steps=1, max_steps=1, max_number=5)


@pytest.mark.parametrize("difficulty", [Difficulty(), CROWDED])
def test_validation_is_fixed_distinct_and_disjoint_from_heldout_and_training(difficulty):
    held = {p["question"] for p in heldout_problems(difficulty)}
    validation = validation_problems(difficulty, n=150)  # a size other than the held-out set's
    questions = {p["question"] for p in validation}
    assert validation == validation_problems(difficulty, n=150) and len(questions) == 150
    assert not questions & held
    # the held-out set is the one it always was: adding a validation split did not move it
    assert heldout_problems(difficulty) == heldout_problems(difficulty, n=HELDOUT_SIZE)
    for seed in (0, 1, 3):  # SFT uses the lab seed, GRPO seed + 1 (cpu_lab.warmstart.prepare_lab)
        train = {p["question"] for p in train_problems(5000, seed, difficulty, validation_n=150)}
        assert not train & questions and not train & held


def test_crowded_space_really_collides_without_the_exclusion():
    # the check above can fail: raw draws from a training seed do contain held-out and validation questions
    rng = random.Random(1)
    raw = {make_problem(rng, CROWDED)["question"] for _ in range(5000)}
    assert raw & {p["question"] for p in validation_problems(CROWDED)}
    assert raw & {p["question"] for p in heldout_problems(CROWDED)}


def test_grpo_data_of_the_lab_leaves_out_both_sets(tmp_path):
    from cpu_lab.warmstart import WarmStartSettings, prepare_lab

    settings = WarmStartSettings(difficulty=CROWDED, validation_n=120, heldout_n=80)  # sizes other than the defaults
    # a cached "model" folder, so prepare_lab only writes the data (no training here)
    cached = tmp_path / "cache" / f"warmstart-{settings.key()}"
    cached.mkdir(parents=True)
    (cached / "warmstart.json").write_text("{}")
    paths = prepare_lab(settings, tmp_path / "cache", tmp_path / "lab")
    grpo = {r["question"] for r in read_jsonl(paths["train"])}
    held = [r["question"] for r in read_jsonl(paths["heldout"])]
    assert len(held) == 80 and not grpo & set(held)
    assert not grpo & {p["question"] for p in validation_problems(CROWDED, 120, heldout_n=80)}


def test_bad_settings_fail_with_a_fix():
    with pytest.raises(ValueError, match="raise max_steps"):
        Difficulty(min_steps=3, max_steps=2)
    with pytest.raises(ValueError, match="held-out or the validation set's seed"):
        train_problems(10, seed=1_000_003)
    with pytest.raises(ValueError, match="held-out or the validation set's seed"):
        train_problems(10, seed=2_000_003)
    with pytest.raises(ValueError, match="distinct problems"):
        heldout_problems(Difficulty(min_steps=1, max_steps=1, max_number=2), n=5000)  # 3,920 stories exist


@pytest.mark.parametrize("task_name", ["lab", "gsm8k_train"])  # the lab's prompt; GSM8K's reads them as well
def test_written_files_load_as_a_gsm8k_shaped_task(tmp_path, task_name):
    from eval.tasks import get_task, load_rows, to_prompt_rows

    train, validation, heldout = write_lab_data(tmp_path, n_train=20)
    rows = to_prompt_rows(get_task(task_name), load_rows(get_task(task_name), str(train)))
    assert len(rows) == 20 and rows[0]["answer"] == train_problems(20)[0]["final"]
    assert len(load_rows(get_task(task_name), str(heldout))) == 200
    assert len(load_rows(get_task(task_name), str(validation))) == 200


def test_lab_task_has_no_hub_copy():
    from eval.tasks import get_task, load_rows

    with pytest.raises(ValueError, match="no hub copy: pass --data"):
        load_rows(get_task("lab"))
