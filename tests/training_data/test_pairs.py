"""The DPO pair builder on hand-made rollouts whose correct pairs are known, and the preference data loader.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/training_data/test_pairs.py
"""

import json
from collections import Counter

import pytest

from training_data.pairs import build_pairs, is_rollouts_file, load_preference_dataset

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


def test_length_gap_is_symmetric_and_one_when_an_answer_is_empty():
    from training_data.pairs import length_gap

    assert length_gap(80, 100) == length_gap(100, 80) == 0.2
    assert length_gap(0, 7) == length_gap(7, 0) == length_gap(1, 0) == 1.0  # one of them is empty
    assert length_gap(10, 1000) == 0.99


def many(pid: int, right: list[int], wrong: list[int]) -> dict:
    """A problem with right answers R0, R1, ... and wrong ones W0, W1, ... of the given token lengths."""
    return rollout(
        pid,
        *[answer(f"R{i}", True, n) for i, n in enumerate(right)],
        *[answer(f"W{i}", False, n) for i, n in enumerate(wrong)],
    )


def test_defaults_are_four_pairs_per_problem_and_seed_zero():
    problem = many(0, [10, 20, 30], [12, 22, 32])  # 9 possible pairs
    pairs, _ = build_pairs([problem])
    assert len(pairs) == 4
    assert texts(pairs) == texts(build_pairs([problem], 4, None, 0)[0])
    assert texts(pairs) != texts(build_pairs([problem], 4, None, 1)[0])  # so the seed is what fixes them


@pytest.mark.parametrize(
    "right, wrong, max_pairs, tolerance, expected",
    [
        # a cap of 1 is a cap
        ([10], [10, 10], 1, None, 1),
        # tolerance 0 keeps equal lengths only
        ([10, 20], [10, 30], None, 0.0, 1),
        # a gap exactly at the tolerance is within it: |100 - 80| / 100 = 0.2
        ([100], [80], None, 0.2, 1),
        # tolerance 1 keeps every pair, even against an empty answer
        ([10, 20], [0, 30], None, 1.0, 4),
    ],
)
def test_the_limits_of_each_option_are_allowed(right, wrong, max_pairs, tolerance, expected):
    pairs, report = build_pairs([many(0, right, wrong)], max_pairs, tolerance)
    assert len(pairs) == expected
    if tolerance == 0.0:
        assert texts(pairs) == [("R0", "W0")]


def test_report_counts_add_up_over_problems():
    rollouts = [
        many(0, [5, 6], []),  # all right
        many(1, [5], []),  # all right
        many(2, [10], [50]),  # no pair within the tolerance (1 too unequal)
        many(3, [10, 11], [50]),  # no pair within the tolerance (2 too unequal)
        many(4, [10, 20], [11, 60]),  # 2 pairs within it (gaps 1/11 and 9/20), 2 too unequal
        many(5, [], [5]),  # all wrong
        many(6, [30], [31]),  # 1 pair
    ]
    pairs, report = build_pairs(rollouts, max_pairs_per_problem=3, length_tolerance=0.5)
    assert texts(pairs) == [("R0", "W0"), ("R1", "W0"), ("R0", "W0")]  # problems 4 and 6, after the pairless ones
    assert [p["id"] for p in pairs] == [4, 4, 6]
    assert report["problems"] == 7
    assert report["problems_all_correct"] == 2 and report["problems_all_wrong"] == 1
    assert report["problems_no_pair_within_length_tolerance"] == 2 and report["problems_with_pairs"] == 2
    assert report["pairs_outside_length_tolerance"] == 1 + 2 + 2
    assert report["mean_chosen_tokens"] == (10 + 20 + 30) / 3 and report["mean_rejected_tokens"] == (11 + 11 + 31) / 3

    # without a tolerance no pair is too unequal, however unequal
    _, report = build_pairs(rollouts, max_pairs_per_problem=3)
    assert report["pairs_outside_length_tolerance"] == 0 and report["problems_with_pairs"] == 4


def test_nothing_is_too_unequal_without_a_gap_beyond_the_tolerance():
    _, report = build_pairs([many(0, [10, 12], [11])], length_tolerance=0.5)
    assert report["pairs_outside_length_tolerance"] == 0


@pytest.mark.parametrize("seed", range(5))
def test_with_a_tolerance_the_closest_in_length_come_first(seed):
    pairs, _ = build_pairs([many(0, [100], [90, 99, 95, 85])], None, 0.2, seed)
    assert texts(pairs) == [("R0", "W1"), ("R0", "W2"), ("R0", "W0"), ("R0", "W3")]


def test_without_a_tolerance_the_seed_not_the_length_picks_the_pairs():
    problem = many(0, [100], [10, 50, 99, 30])
    first = {texts(build_pairs([problem], 1, None, seed)[0])[0] for seed in range(20)}
    assert len(first) > 1


@pytest.mark.parametrize(
    "right, wrong, expected",
    [
        # R1/W1 are equal; then R1/W0 (gap 1/12) before R0/W1 (1/11): each reuses one answer once
        ([10, 11], [12, 11], [("R1", "W1"), ("R1", "W0"), ("R0", "W1")]),
        # the mirror image: R0/W1 (1/12) before R1/W0 (1/11)
        ([12, 11], [10, 11], [("R1", "W1"), ("R0", "W1"), ("R1", "W0")]),
    ],
)
def test_between_pairs_that_reuse_as_much_the_closer_comes_first(right, wrong, expected):
    for seed in range(3):
        assert texts(build_pairs([many(0, right, wrong)], None, 0.1, seed)[0]) == expected


@pytest.mark.parametrize(
    "right, wrong, expected",
    [
        # tolerance 0.5: R0/W1 equal; then R0/W0 (gap 0.45) and R1/W1 (0.5) each reuse one answer: closer first
        ([20, 40], [11, 20], [("R0", "W1"), ("R0", "W0"), ("R1", "W1")]),
        ([11, 20], [20, 40], [("R1", "W0"), ("R0", "W0"), ("R1", "W1")]),
    ],
)
def test_a_used_answer_counts_once_per_use(right, wrong, expected):
    assert texts(build_pairs([many(0, right, wrong)], None, 0.5)[0]) == expected


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_right, n_wrong", [(2, 3), (3, 2)])
def test_every_answer_is_used_before_any_is_reused(seed, n_right, n_wrong):
    problem = many(0, [10] * n_right, [10] * n_wrong)
    got = texts(build_pairs([problem], None, None, seed)[0])
    assert len(got) == n_right * n_wrong
    smaller, larger = (0, 1) if n_right < n_wrong else (1, 0)
    # the first 3 pairs use each of the 3 answers on one side once; in the first 4, the 2 on the other side
    # are used twice each
    assert len({pair[larger] for pair in got[:3]}) == 3
    assert sorted(Counter(pair[smaller] for pair in got[:4]).values()) == [2, 2]


def test_load_preference_dataset_passes_its_options_to_the_pair_builder(tmp_path):
    problems = [many(0, [10, 20, 30], [12, 22, 90]), many(1, [40, 40, 40], [40, 40, 40])]  # 1: the seed decides
    path = write(tmp_path / "rollouts.jsonl", problems)
    options = {"max_pairs_per_problem": 2, "length_tolerance": 0.5, "seed": 3}  # none of them the default
    dataset, report = load_preference_dataset(path, **options)
    pairs, expected_report = build_pairs(problems, **options)
    assert dataset.to_list() == [{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in pairs]
    assert report == expected_report and report["pairs_outside_length_tolerance"] > 0 and len(pairs) == 4
    for other in ({"seed": 0}, {"max_pairs_per_problem": 4}, {"length_tolerance": None}):  # each option matters
        assert texts(build_pairs(problems, **{**options, **other})[0]) != texts(pairs)

    dataset, report = load_preference_dataset(path)  # defaults: the pair builder's
    got = [(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in dataset]
    assert got == texts(build_pairs(problems)[0])
    assert report == build_pairs(problems)[1]


def test_load_preference_dataset_reads_a_hub_id_with_its_split(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(source, split):
        calls.append((source, split))
        return datasets.Dataset.from_list([{"prompt": "Q", "chosen": "good", "rejected": "bad"}] * 3)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    dataset, report = load_preference_dataset("someone/prefs", split="test")
    assert len(dataset) == 3 and report is None and calls == [("someone/prefs", "test")]
    load_preference_dataset("someone/prefs")
    assert calls[-1] == ("someone/prefs", "train")

    empty = datasets.Dataset.from_dict({"prompt": [], "chosen": [], "rejected": []})
    monkeypatch.setattr(datasets, "load_dataset", lambda source, split: empty)
    with pytest.raises(ValueError, match="someone/prefs holds no pair: DPO needs at least one"):
        load_preference_dataset("someone/prefs")


def test_errors_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"Sample more answers per problem \(--k\).*or loosen length_tolerance"):
        load_preference_dataset(write(tmp_path / "wrong.jsonl", [many(0, [], [3])]))
    fix = (
        r"DPO needs prompt/chosen/rejected columns, or a rollouts file from `python -m training_data\.rollouts sample`$"
    )
    with pytest.raises(ValueError, match=fix):
        load_preference_dataset(write(tmp_path / "half.jsonl", [{"prompt": "Q", "chosen": "good"}]))


def test_a_file_of_blank_lines_or_pairs_is_not_a_rollouts_file(tmp_path):
    from training_data.pairs import is_rollouts_file

    assert not is_rollouts_file(write(tmp_path / "blank.jsonl", []))
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    assert not is_rollouts_file(tmp_path / "blank.jsonl")
    assert not is_rollouts_file(write(tmp_path / "pairs.jsonl", [{"prompt": "Q", "chosen": "a", "rejected": "b"}]))
    assert is_rollouts_file(write(tmp_path / "rollouts.jsonl", [many(0, [1], [2])]))


# --- the fix named for a missing or corrupt pairs file ---


def test_a_corrupt_or_missing_pairs_file_is_named_with_the_fix(tmp_path):
    corrupt = tmp_path / "rollouts.jsonl"
    corrupt.write_text('{"question": "q", "completions": []}\n{not json\n')
    assert is_rollouts_file(corrupt)  # the first row tells, before the corrupt one is read
    corrupt.write_text("{not json\n")
    fix = r": pass a rollouts or pairs \.jsonl file$"
    with pytest.raises(ValueError, match=r"rollouts\.jsonl line 1 is not JSON .*" + fix):
        is_rollouts_file(corrupt)
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl does not exist" + fix):
        is_rollouts_file(tmp_path / "missing.jsonl")
