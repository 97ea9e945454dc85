"""The DPO pair builder on hand-made rollouts whose correct pairs are known, and the preference data loader.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_pairs.py
"""

import json

import pytest

from eval.pairs import build_pairs, load_preference_dataset

PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]


def answer(text: str, correct: bool, n_tokens: int) -> dict:
    return {"text": text, "correct": correct, "n_tokens": n_tokens}


def rollout(pid: int, *completions: dict) -> dict:
    pass_rate = sum(c["correct"] for c in completions) / len(completions)
    return {"id": pid, "prompt": PROMPT, "completions": list(completions), "pass_rate": pass_rate}


def texts(pairs: list[dict]) -> list[tuple[str, str]]:
    return [(p["chosen"][0]["content"], p["rejected"][0]["content"]) for p in pairs]


@pytest.mark.parametrize(
    "completions, max_pairs, tolerance, expected",
    [
        # one right, one wrong: the one pair
        ([answer("R", True, 10), answer("W", False, 10)], 4, None, {("R", "W")}),
        # one right, two wrong, no cap: the right answer against each wrong one
        (
            [answer("R", True, 10), answer("W1", False, 5), answer("W2", False, 30)],
            None,
            None,
            {("R", "W1"), ("R", "W2")},
        ),
        # two right, two wrong, cap 2: every answer used once before any is reused
        (
            [answer("R1", True, 10), answer("R2", True, 10), answer("W1", False, 10), answer("W2", False, 10)],
            2,
            None,
            "each once",
        ),
        # length tolerance 0.2: only the pairs of similar length survive, closest first
        (
            [
                answer("short", True, 10),
                answer("long", True, 100),
                answer("w_long", False, 95),
                answer("w_short", False, 11),
            ],
            None,
            0.2,
            {("long", "w_long"), ("short", "w_short")},
        ),
        # duplicate texts count once: two copies of the right answer give one pair, not two
        ([answer("R", True, 10), answer("R", True, 10), answer("W", False, 10)], None, None, {("R", "W")}),
    ],
)
def test_pairs_from_hand_made_rollouts(completions, max_pairs, tolerance, expected):
    pairs, report = build_pairs([rollout(0, *completions)], max_pairs, tolerance)
    got = texts(pairs)
    assert len(got) == len(set(got)), "a pair was repeated"
    assert all(p["prompt"] == PROMPT and p["id"] == 0 for p in pairs)
    if expected == "each once":
        assert len(got) == 2
        assert {c for c, _ in got} == {"R1", "R2"} and {r for _, r in got} == {"W1", "W2"}
    else:
        assert set(got) == expected
    assert report["pairs"] == len(pairs) and report["problems_with_pairs"] == 1


def test_problems_without_a_right_or_wrong_answer_give_no_pair_and_are_counted():
    rollouts = [
        rollout(0, answer("R", True, 5), answer("R2", True, 6)),  # all right
        rollout(1, answer("W", False, 5)),  # all wrong
        rollout(2, answer("W", False, 5), answer("W2", False, 7)),  # all wrong
        rollout(3, answer("R", True, 5), answer("W", False, 50)),  # a pair, unless lengths must match
    ]
    pairs, report = build_pairs(rollouts)
    assert [p["id"] for p in pairs] == [3]
    assert (report["problems_all_correct"], report["problems_all_wrong"], report["problems_with_pairs"]) == (1, 2, 1)
    assert (report["mean_chosen_tokens"], report["mean_rejected_tokens"]) == (5, 50)

    pairs, report = build_pairs(rollouts, length_tolerance=0.5)
    assert pairs == [] and report["problems_no_pair_within_length_tolerance"] == 1
    assert report["pairs_outside_length_tolerance"] == 1


def test_cap_and_seed():
    many = rollout(0, *[answer(f"R{i}", True, 10) for i in range(4)], *[answer(f"W{i}", False, 10) for i in range(4)])
    pairs, _ = build_pairs([many], max_pairs_per_problem=3, seed=1)
    assert len(pairs) == 3
    assert texts(build_pairs([many], 3, seed=1)[0]) == texts(pairs)  # the seed fixes which pairs
    assert len(build_pairs([many], None)[0]) == 16  # no cap: every right x wrong pair


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_pairs_per_problem": 0}, "max_pairs_per_problem"),  # zero pairs is not a cap
        ({"length_tolerance": 1.5}, "length_tolerance"),  # a relative gap is at most 1
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_pairs([], **kwargs)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_load_preference_dataset_from_rollouts_and_from_pairs(tmp_path):
    rollouts = write(tmp_path / "rollouts.jsonl", [{**rollout(0, answer("R", True, 3), answer("W", False, 3))}])
    dataset, report = load_preference_dataset(rollouts)
    assert dataset.column_names == ["prompt", "chosen", "rejected"] and len(dataset) == 1
    assert report["pairs"] == 1

    ready = write(tmp_path / "pairs.jsonl", [{"prompt": "Q", "chosen": "good", "rejected": "bad"}])
    dataset, report = load_preference_dataset(ready)
    assert len(dataset) == 1 and report is None


@pytest.mark.parametrize(
    "rows, message",
    [
        # a pairs file without the rejected column
        ([{"prompt": "Q", "chosen": "good"}], r"no \['rejected'\] column"),
        # rollouts where every answer is wrong: nothing to prefer
        ([rollout(0, answer("W", False, 3))], "no preference pair"),
    ],
)
def test_load_preference_dataset_errors(tmp_path, rows, message):
    with pytest.raises(ValueError, match=message):
        load_preference_dataset(write(tmp_path / "data.jsonl", rows))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_preference_dataset(str(tmp_path / "nope.jsonl"))
