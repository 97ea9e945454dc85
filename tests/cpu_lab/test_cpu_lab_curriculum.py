"""The lab's curriculum: the controller, the problems it draws, and a real recipe run whose difficulty moves.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_curriculum.py
"""

from types import SimpleNamespace

import pytest

from cpu_lab import curriculum
from cpu_lab.curriculum import LADDER, PASS_RATE_KEY, START_LEVEL, CurriculumController, CurriculumDataset
from cpu_lab.problems import Difficulty, dev_problems, heldout_problems, kept_out_solutions, ood_problems, solution
from eval.jsonl import read_jsonl, write_jsonl
from recipes import checks, grpo
from tests.helpers import parse_recipe_config, tiny_run_flags


def levels(controller, rates):
    return [controller.update(r) for r in rates]


def test_level_rises_while_the_pass_rate_is_high_and_stops_at_the_top():
    c = CurriculumController(n_levels=4, level=1, patience=3)
    assert levels(c, [0.9] * 3) == [1, 1, 2]  # waits `patience` steps, then one level up
    assert levels(c, [0.9] * 3) == [2, 2, 3]
    assert levels(c, [0.9] * 6) == [3] * 6  # bounded: the top is the top


def test_level_falls_while_the_pass_rate_is_low_and_stops_at_the_bottom():
    c = CurriculumController(n_levels=4, level=2, patience=2)
    assert levels(c, [0.05] * 6) == [2, 1, 1, 0, 0, 0]


def test_level_holds_inside_the_band_and_follows_the_running_rate_not_one_step():
    c = CurriculumController(n_levels=5, level=2, patience=1, smoothing=0.5)
    assert levels(c, [0.5, 0.4, 0.6, 0.5]) == [2, 2, 2, 2]
    # one step at 0.2 after two at 0.6: the running rate is 0.5 * 0.2 + 0.5 * 0.6 = 0.4, still inside [0.35, 0.65]
    c = CurriculumController(n_levels=5, level=2, patience=1, smoothing=0.5)
    assert levels(c, [0.6, 0.6, 0.2]) == [2, 2, 2] and c.running == pytest.approx(0.4)
    assert levels(c, [0.2]) == [1]  # a second one takes it to 0.3: down


def test_after_a_move_the_running_rate_restarts_on_the_new_level():
    c = CurriculumController(n_levels=5, level=2, patience=2)
    levels(c, [0.95, 0.95])
    assert c.level == 3 and c.running is None and c.since_move == 0
    assert levels(c, [0.5]) == [3] and c.running == 0.5  # the old level's rate is forgotten


def test_same_pass_rates_give_the_same_levels():
    rates = [0.2, 0.1, 0.3, 0.7, 0.9, 0.8, 0.95, 0.4, 0.6, 0.2, 0.1, 0.05] * 3
    runs = [levels(CurriculumController(len(LADDER), START_LEVEL), rates) for _ in range(2)]
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1  # and the sequence did move


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_levels": 3, "level": 3}, "outside"),
        ({"n_levels": 3, "level": 0, "low": 0.7, "high": 0.6}, "low < high"),
        ({"n_levels": 3, "level": 0, "patience": 0}, "patience"),
        ({"n_levels": 3, "level": 0, "smoothing": 0.0}, "smoothing"),
    ],
)
def test_bad_settings_fail_with_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CurriculumController(**kwargs)


def test_a_pass_rate_outside_0_1_is_refused():
    c = CurriculumController(n_levels=3, level=1)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="not in \\[0, 1\\]"):
            c.update(bad)


def test_ladder_runs_easy_to_hard_through_the_heldout_difficulty():
    assert LADDER[START_LEVEL] == Difficulty()  # the start is the held-out set's own difficulty
    assert [d.min_steps for d in LADDER] == sorted(d.min_steps for d in LADDER)
    assert all(d.max_steps <= 2 for d in LADDER)  # three operations do not fit 32 tokens


def test_problems_are_fixed_per_seed_level_and_index_and_never_kept_out():
    a = curriculum.problem_at(0, 1, 5, set())
    assert a == curriculum.problem_at(0, 1, 5, set())
    assert a != curriculum.problem_at(1, 1, 5, set()) and a != curriculum.problem_at(0, 2, 5, set())
    redrawn = curriculum.problem_at(0, 1, 5, {solution(a)})  # a kept-out solution is skipped
    assert solution(redrawn) != solution(a)


def test_dataset_keeps_out_the_fixed_heldout_set_at_every_level():
    data = CurriculumDataset(64, seed=0, task_name="lab")
    fixed = {solution(p) for p in heldout_problems() + dev_problems() + ood_problems()}
    assert data.kept_out == fixed == kept_out_solutions()  # the default difficulty's, whatever the level
    for level in range(len(LADDER)):
        data.level = level
        rows = data.dataset[list(range(64))]
        drawn = [curriculum.problem_at(0, level, i, data.kept_out) for i in range(64)]  # what the rows hold
        assert [p["question"] for p in drawn] == rows["question"]
        assert not fixed & {solution(p) for p in drawn}
        assert rows["curriculum_level"] == [level] * 64
        # every answer is the final number of a problem at that level's number of operations
        steps = {q.count(". ") - 1 for q in rows["question"]}
        assert steps <= set(range(LADDER[level].min_steps, LADDER[level].max_steps + 1)), (level, steps)


def test_the_g_copies_of_a_prompt_in_one_fetch_are_one_problem_and_a_move_changes_the_next_fetch():
    data = CurriculumDataset(8, seed=3, task_name="lab")
    batch = data.dataset[[2, 2, 2, 2, 5, 5, 5, 5]]  # as TRL's RepeatSampler orders a batch (G = 4)
    assert len(set(batch["question"][:4])) == 1 and len(set(batch["question"][4:])) == 1
    assert batch["prompt"][0][0]["content"].endswith("End with #### and the number.")  # the lab task's prompt
    data.level = START_LEVEL + 1
    assert data.dataset[[2]]["question"] != batch["question"][:1]
    assert data.fetched_levels == [START_LEVEL, START_LEVEL + 1]


def test_callback_logs_the_served_level_moves_the_level_and_skips_lines_without_a_pass_rate():
    data = CurriculumDataset(8, seed=0, task_name="lab")
    controller = CurriculumController(len(LADDER), START_LEVEL, patience=1)
    callback = curriculum.make_callback(controller, data, group_size=8)
    data.dataset[[0, 0]]  # step 1's fetch
    eval_line = {"eval/accuracy": 0.5}
    callback.on_log(None, SimpleNamespace(global_step=1), None, logs=eval_line)
    assert eval_line == {"eval/accuracy": 0.5} and data.level == START_LEVEL
    logs = {PASS_RATE_KEY: 0.0}
    callback.on_log(None, SimpleNamespace(global_step=1), None, logs=logs)
    assert logs["curriculum/difficulty"] == START_LEVEL and logs["curriculum/next_difficulty"] == START_LEVEL - 1
    assert data.level == START_LEVEL - 1
    assert logs["curriculum/degenerate_predicted_share"] == pytest.approx(1.0)  # p = 0: every group all wrong
    data.dataset[[1, 1]]  # step 2's fetch, at the new level
    logs = {PASS_RATE_KEY: 0.5}
    callback.on_log(None, SimpleNamespace(global_step=2), None, logs=logs)
    assert logs["curriculum/difficulty"] == START_LEVEL - 1
    assert logs["curriculum/degenerate_predicted_share"] == pytest.approx(2 * 0.5**8)


def test_hook_refuses_gradient_accumulation():
    args = SimpleNamespace(gradient_accumulation_steps=2, steps_per_generation=2, seed=0, num_generations=8)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        curriculum.lab_curriculum([0] * 4, args)


def test_recipe_refuses_a_malformed_hook_before_loading_a_model():
    with pytest.raises(ValueError, match="module:function"):
        checks.import_hook("cpu_lab.curriculum.lab_curriculum")
    with pytest.raises(ValueError, match="cannot be imported"):
        checks.import_hook("cpu_lab.curriculum:no_such_function")


@pytest.mark.integration
def test_recipe_run_moves_and_logs_the_difficulty(tiny_model_dir, tmp_path):
    """A real GRPO run of the lab config on the untrained tiny model: it answers nothing right, so the curriculum
    must step down from the held-out difficulty, and every training log line says so."""
    from cpu_lab.problems import train_problems

    train = write_jsonl(train_problems(32, seed=5), tmp_path / "train.jsonl")
    heldout = write_jsonl(heldout_problems(n=4), tmp_path / "heldout.jsonl")
    out = tmp_path / "run"
    args = [
        "--model_name_or_path",
        str(tiny_model_dir),
        "--output_dir",
        str(out),
        "--data",
        str(train),
        "--eval_data",
        str(heldout),
        *tiny_run_flags(max_steps=6, monitor_eval_steps=0, probe_problems=0, per_device_train_batch_size=16),
    ]
    grpo.main(*parse_recipe_config(grpo, "recipes/configs/lab/grpo_lab_default.yaml", *args))
    steps = [r for r in read_jsonl(out / "log.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert all(r[PASS_RATE_KEY] == 0.0 for r in steps)  # the untrained model: nothing right
    served = [r["curriculum/difficulty"] for r in steps]
    planned = [r["curriculum/next_difficulty"] for r in steps]
    # patience 4: the level drops after step 4's log; the fetch for step 5 happened a step ahead, step 6's after it
    assert planned == [START_LEVEL] * 3 + [START_LEVEL - 1] * 3
    assert served == [START_LEVEL] * 5 + [START_LEVEL - 1]
    for r in steps:  # the measured, the monitors' and the curriculum's predicted degenerate shares, side by side
        assert r["monitor/degenerate_share"] == 1.0 and r["curriculum/degenerate_predicted_share"] == 1.0
        assert "monitor/degenerate_expected_share" in r and r["curriculum/pass_rate"] == 0.0
