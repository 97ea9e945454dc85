"""pass@k curves: the values for every k against hand computation, the paired difference against `eval compare`'s,
the `eval passk` table and plot of real `eval score` folders, and the refusals (other problems, other task, k beyond
the samples).

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/eval/test_passk.py
"""

import json
import re

import numpy as np
import pytest

import eval.__main__ as cli
from eval.metrics import bootstrap_ci, compare_pass_at_k, compare_records, pass_at_k_curve, summarize
from eval.predictions import score_predictions
from eval.report import format_ci


def problem(index: int, n_correct: int, k: int) -> dict:
    return {"index": index, "samples": [{"correct": j < n_correct} for j in range(k)]}


def test_curve_equals_hand_computed_values():
    # 4 samples each, 0, 1, 2 and 4 correct. pass@k = 1 - C(4-c, k) / C(4, k) per problem, then the mean:
    # k=1: (0 + 1/4 + 2/4 + 1) / 4;  k=2: (0 + 1 - 3/6 + 1 - 1/6 + 1) / 4;  k=3: (0 + 1 - 1/4 + 1 + 1) / 4;  k=4: 3/4
    records = [problem(i, c, 4) for i, c in enumerate([0, 1, 2, 4])]
    expected = [0.4375, (0.5 + 5 / 6 + 1) / 4, 0.6875, 0.75]
    assert pass_at_k_curve(records) == pytest.approx(expected, abs=1e-12)


def test_summarize_writes_the_curve_next_to_the_powers_of_two():
    records = [problem(i, c, 3) for i, c in enumerate([1, 3])]
    # k=1: (1/3 + 1) / 2; k=2: (1 - C(2,2)/C(3,2) + 1) / 2 = (2/3 + 1) / 2; k=3: 1
    result = summarize([{**r, "samples": [s | sample_fields() for s in r["samples"]]} for r in records])
    assert result["pass_at_k_curve"] == pytest.approx([2 / 3, 5 / 6, 1.0])
    assert result["pass_at_k"] == pytest.approx({"1": 2 / 3, "2": 5 / 6, "3": 1.0})


def sample_fields() -> dict:
    return {"n_tokens": 5, "truncated": False, "reason": "ok", "format_ok": True, "empty": False}


def test_curve_stops_at_the_fewest_samples_a_problem_has():
    assert len(pass_at_k_curve([problem(0, 1, 4), problem(1, 1, 2)])) == 2


def test_paired_difference_at_k_1_is_compares_and_at_k_2_is_hand_computed():
    rng = np.random.default_rng(3)
    counts_a, counts_b = rng.integers(0, 5, size=40), rng.integers(0, 5, size=40)
    records_a = [problem(i, int(c), 4) for i, c in enumerate(counts_a)]
    records_b = [problem(i, int(c), 4) for i, c in enumerate(counts_b)]
    at_1, accuracy = compare_pass_at_k(records_a, records_b, k=1), compare_records(records_a, records_b)
    assert at_1["difference"] == pytest.approx(accuracy["difference"])
    assert at_1["ci"] == pytest.approx(accuracy["ci"])  # the same resampling, resamples and seed
    at_2 = compare_pass_at_k(records_a, records_b, k=2)
    per_problem = {c: 1 - (4 - c) * (3 - c) / 12 for c in range(5)}  # 1 - C(4-c, 2) / C(4, 2)
    diffs = [per_problem[int(b)] - per_problem[int(a)] for a, b in zip(counts_a, counts_b, strict=True)]
    assert at_2["difference"] == pytest.approx(np.mean(diffs))
    assert at_2["ci"] == pytest.approx(list(bootstrap_ci(diffs)))
    assert at_2["n_shared"] == 40 and at_2["ci"][0] < at_2["difference"] < at_2["ci"][1]


def scored_folder(tmp_path, name: str, n_correct: list[int], k: int = 4, task: str = "gsm8k", questions=None):
    """An `eval score` folder: problem i asks questions[i] (gold 7), with n_correct[i] of its k samples right."""
    questions = questions or [f"question {i}" for i in range(len(n_correct))]
    rows = [
        {"question": q, "answer": "#### 7", "completion": ["#### 7"] * c + ["#### 8"] * (k - c)}
        for q, c in zip(questions, n_correct, strict=True)
    ]
    if task == "math500":
        rows = [{"problem": r["question"], "answer": "7", "completion": r["completion"]} for r in rows]
    predictions = tmp_path / f"{name}.jsonl"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    score_predictions(task, predictions, tmp_path / name)
    return str(tmp_path / name)


def table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            rows[cells[0]] = cells[1:]
    return rows


def test_passk_prints_every_folder_and_the_difference_and_plots(tmp_path, capsys):
    a = scored_folder(tmp_path, "a", [0, 1, 4])
    b = scored_folder(tmp_path, "b", [2, 1, 4])
    png = tmp_path / "passk.png"
    cli.main(["passk", a, b, "--ks", "1,2,4", "--png", str(png)])
    text = capsys.readouterr().out
    assert f"| k | A: {a} | B: {b} | B - A, 95% CI |" in text
    rows = table_rows(text)
    # A: k=1 (0 + 1/4 + 1)/3, k=2 (0 + 1/2 + 1)/3, k=4 (0 + 1 + 1)/3; B: (1/2 + 1/4 + 1)/3, (5/6 + 1/2 + 1)/3, 1
    assert [rows[k][:2] for k in ("1", "2", "4")] == [["41.7%", "58.3%"], ["50.0%", "77.8%"], ["66.7%", "100.0%"]]
    diffs_at_2 = [5 / 6, 0.0, 0.0]  # B - A per problem at k = 2
    assert rows["2"][2] == f"+27.8 points {format_ci(bootstrap_ci(diffs_at_2))}"
    assert "over the same 3 problems" in text and "Samples per problem: A 4, B 4" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_passk_default_rows_and_a_folder_with_fewer_samples(tmp_path, capsys):
    a = scored_folder(tmp_path, "a", [1, 2], k=2)
    b = scored_folder(tmp_path, "b", [1, 3], k=4)
    c = scored_folder(tmp_path, "c", [0, 4], k=4)
    cli.main(["passk", a, b, c])
    text = capsys.readouterr().out
    rows = table_rows(text)
    assert list(rows) == ["1", "2", "4"]  # powers of two up to the largest K
    assert rows["4"][0] == "n/a" and rows["4"][1] == "100.0%" and rows["4"][3] == "n/a"  # A has 2 samples
    assert "C - A, 95% CI" in text and rows["1"][4].startswith("-25.0 points")  # C - A at k=1: (0 + 1 - 1/2 - 1)/2


@pytest.mark.parametrize(
    "case, error",
    [
        ("other_question", r"hold different problems \(1 only in .*b, 1 only in .*a\)"),  # same index, new question
        ("fewer_problems", r"hold different problems \(0 only in .*b, 1 only in .*a\)"),  # another --limit
        ("other_task", "holds task 'math500' and .* task 'gsm8k'"),
        ("k_beyond_samples", "--ks 8: the folders hold at most 4 samples per problem"),
        ("not_a_folder", "results.json not found"),
        ("twice", "a folder is named twice"),
    ],
)
def test_passk_refuses_in_one_line(case, error, tmp_path, capsys):
    a = scored_folder(tmp_path, "a", [0, 1, 4])
    argv = ["passk", a]
    if case == "other_question":
        argv.append(scored_folder(tmp_path, "b", [0, 1, 4], questions=["question 0", "question 1", "other"]))
    elif case == "fewer_problems":
        argv.append(scored_folder(tmp_path, "b", [0, 1]))
    elif case == "other_task":
        argv.append(scored_folder(tmp_path, "b", [0, 1, 4], task="math500"))
    elif case == "k_beyond_samples":
        argv += ["--ks", "1,8"]
    elif case == "not_a_folder":
        argv.append(str(tmp_path))
    elif case == "twice":
        argv.append(a)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(error, err), err


def test_ks_must_be_whole_numbers_from_1(capsys):
    for bad in ("0,2", "two", ""):
        with pytest.raises(SystemExit):
            cli.make_parser().parse_args(["passk", "x", "--ks", bad])
        assert "--ks takes" in capsys.readouterr().err
