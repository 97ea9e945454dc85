"""The lab's problem generator: deterministic per seed, correct worked solutions, splits that share no worked solution.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_problems.py
"""

import json
import random
import re

import pytest

from cpu_lab.problems import (
    OOD_SIZE,
    TEST_SIZE,
    Difficulty,
    check_disjoint,
    dev_problems,
    heldout_problems,
    make_problem,
    ood_problems,
    question_rule_overlap,
    solution,
    train_problems,
    write_lab_data,
)
from eval.jsonl import read_jsonl, write_jsonl
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
    for problem in train_problems(300, seed=7, difficulty=difficulty, test_n=2, dev_n=1, ood_n=1):
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


def test_test_set_is_fixed_and_distinct_on_the_solution():
    tested = heldout_problems()
    assert tested == heldout_problems() and len(tested) == TEST_SIZE
    assert len({solution(p) for p in tested}) == TEST_SIZE  # no worked solution twice inside the test set
    assert heldout_problems(n=500)[:TEST_SIZE] == tested  # a larger test set keeps the smaller one's problems


# A story space small enough (~40 one-step solutions) that training draws WOULD hit the kept-out solutions over and
# over if the generator did not leave them out; at the default difficulty a missing exclusion shows too (below).
CROWDED = Difficulty(min_steps=1, max_steps=1, max_number=5)


@pytest.mark.parametrize(("difficulty", "sizes"), [(Difficulty(), (200, 200, 200)), (CROWDED, (6, 5, 4))])
def test_no_dev_test_or_ood_problem_shares_its_solution_with_training(difficulty, sizes):
    test_n, dev_n, ood_n = sizes
    tested = {solution(p) for p in heldout_problems(difficulty, test_n)}
    dev = dev_problems(difficulty, dev_n, test_n)
    ood = ood_problems(difficulty, ood_n, test_n, dev_n)
    assert dev == dev_problems(difficulty, dev_n, test_n) and len({solution(p) for p in dev}) == dev_n
    assert not tested & {solution(p) for p in dev}
    assert not (tested | {solution(p) for p in dev}) & {solution(p) for p in ood}
    kept_out = tested | {solution(p) for p in dev + ood}
    for seed in (0, 1, 3):  # SFT uses the lab seed, GRPO seed + 1 (cpu_lab.warmstart.prepare_lab)
        train = train_problems(5000, seed, difficulty, test_n, dev_n, ood_n)
        assert not kept_out & {solution(p) for p in train}


def test_question_text_alone_would_let_solutions_through():
    # the check above can fail: training drawn with only the questions kept out does share solutions, at the
    # default difficulty too (names and items change the question, not the arithmetic)
    splits = {"dev": dev_problems(), "test": heldout_problems(n=500), "ood": ood_problems()}
    before = question_rule_overlap(5000, 0, Difficulty(), splits)
    assert before["test"] > 50 and before["dev"] > 20 and before["ood"] > 10
    rng = random.Random(1)
    raw = {solution(make_problem(rng, CROWDED)) for _ in range(5000)}
    assert raw & {solution(p) for p in dev_problems(CROWDED, 5, 6)}


def test_ood_shifts_each_change_one_thing_and_lie_outside_training():
    rows = ood_problems()
    by_shift = {
        shift: [r for r in rows if r["shift"] == shift] for shift in ("more_steps", "larger_numbers", "new_words")
    }
    assert [len(v) for v in by_shift.values()] == [OOD_SIZE] * 3
    train = train_problems(5000, 0)
    train_steps = {p["answer"].count("\n") for p in train}
    train_numbers = {int(n) for p in train for n in re.findall(r"\d+", p["question"])}
    train_words = {w for p in train for w in re.findall(r"[A-Za-z]+", p["question"])}
    assert all(p["answer"].count("\n") > max(train_steps) for p in by_shift["more_steps"])
    assert all(
        int(n) > max(train_numbers) for p in by_shift["larger_numbers"] for n in re.findall(r"\d+", p["question"])
    )
    for p in by_shift["new_words"]:  # a new name and a new item in every story, numbers in training's range
        words = set(re.findall(r"[A-Za-z]+", p["question"]))
        assert words - train_words and max(int(n) for n in re.findall(r"\d+", p["question"])) <= 50
    for p in rows:  # still correct, GSM8K-shaped problems
        assert extract_answer(p["answer"]).value == p["final"] and is_correct(p["answer"], p["final"], "gsm8k")


def test_written_data_reports_overlap_before_and_after(tmp_path):
    paths = write_lab_data(tmp_path, n_train=3000, test_n=300)
    info = json.loads((tmp_path / "splits.json").read_text())
    overlap = info["solution_overlap_with_train"]
    assert overlap["solution_rule"] == {"dev": 0, "test": 0, "ood": 0}
    assert overlap["question_rule"]["test"] > 0  # the older rule's count, measured, not assumed
    assert sorted(paths) == ["dev", "ood", "test", "train"] and "ood" in paths["ood"].name
    check_disjoint(paths)  # passes on what it wrote
    rows = read_jsonl(paths["train"])  # a test problem slipped into training, under another name, is refused
    leaked = {**read_jsonl(paths["test"])[7], "question": "Someone else's story"}
    write_jsonl([*rows, leaked], paths["train"])
    with pytest.raises(ValueError, match="1 problems share their worked solution"):
        check_disjoint(paths)


def test_bad_settings_fail_with_a_fix():
    with pytest.raises(ValueError, match="raise max_steps"):
        Difficulty(min_steps=3, max_steps=2)
    with pytest.raises(ValueError, match="min_number < max_number"):
        Difficulty(min_number=60)
    with pytest.raises(ValueError, match="test, dev or OOD set's seed"):
        train_problems(10, seed=1_000_003)
    with pytest.raises(ValueError, match="test, dev or OOD set's seed"):
        train_problems(10, seed=2_000_003)
    with pytest.raises(ValueError, match="distinct solutions"):
        heldout_problems(Difficulty(min_steps=1, max_steps=1, max_number=2), n=50)  # 5 one-step solutions exist


@pytest.mark.parametrize("task_name", ["lab", "gsm8k_train"])  # the lab's prompt; GSM8K's reads them as well
def test_written_files_load_as_a_gsm8k_shaped_task(tmp_path, task_name):
    from eval.tasks import get_task, load_rows, to_prompt_rows

    paths = write_lab_data(tmp_path, n_train=20)
    rows = to_prompt_rows(get_task(task_name), load_rows(get_task(task_name), str(paths["train"])))
    assert len(rows) == 20 and rows[0]["answer"] == train_problems(20)[0]["final"]
    for split, size in (("test", TEST_SIZE), ("dev", 200), ("ood", 3 * OOD_SIZE)):
        assert len(load_rows(get_task(task_name), str(paths[split]))) == size


def test_lab_task_has_no_hub_copy():
    from eval.tasks import get_task, load_rows

    with pytest.raises(ValueError, match="no hub copy: pass --data"):
        load_rows(get_task("lab"))
