"""The real-model lab (``cpu_lab.real``): its report from run folders, its errors, and (slow tier) its mechanics on
SmolLM2 in a few steps: every stage through its recipe, every arm's monitors, probes and before/after evals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cpu_lab import real, real_report, runner
from cpu_lab.real_report import time_lines
from eval.jsonl import read_jsonl, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def curves_drawn_only_where_looked_at(request, monkeypatch):
    """matplotlib takes a second or more to draw a report's curves.png: the tests of the report's text get an empty
    file, and those that look at the picture ask for ``drawn_curves``."""
    if "drawn_curves" not in request.fixturenames:
        monkeypatch.setattr(real_report, "plot_curves", lambda folders, path: Path(path).touch() or Path(path))


@pytest.fixture
def drawn_curves():
    """The report draws its curves with matplotlib."""


def _result(correct: list[bool], formatted: float) -> dict:
    from eval.metrics import wilson_interval

    k, n = sum(correct), len(correct)
    return {
        "accuracy": k / n,
        "n": n,
        "n_correct": k,
        "ci": list(wilson_interval(k, n)),
        "format_rate": formatted,
        "length_tokens": {"correct": {"n": k, "mean": 12.0}, "wrong": {"n": n - k, "mean": 20.0}},
    }


def _eval(folder: Path, verdicts: list[bool], formatted: float) -> dict:
    """A finished evaluation in ``folder``: problem i right when verdicts[i]; returns its results."""
    rows = [{"index": i, "correct": c, "completion": "#### 1"} for i, c in enumerate(verdicts)]
    write_jsonl(rows, folder / "samples.jsonl")
    (folder / "results.json").write_text(json.dumps(result := _result(verdicts, formatted)))
    return result


def _run(folder: Path, after: list[bool], config: str, log: list[dict], before: list[bool] | None = None) -> None:
    """A finished run: a lab run (its one test reading in ``eval_test``; its 'before' is its start's) or, with
    ``before``, a recipe run that read its held-out set itself (``eval_before``/``eval_after``: a screen on dev)."""
    folder.mkdir(parents=True)
    report = {"seconds": 12.0} | ({"steps": len(log)} if "sft" in Path(config).stem else {})  # GRPO's: in its log
    if before is None:
        _eval(folder / "eval_test", after, 0.9)
    else:
        report |= {
            "before": _eval(folder / "eval_before", before, 0.5),
            "after": _eval(folder / "eval_after", after, 0.9),
        }
    (folder / "report.json").write_text(json.dumps(report))
    write_jsonl(log, folder / "log.jsonl")
    settings = {"config": config, "config_settings": {}, "seed": 0, "extra_args": ["--max_steps", "3"]}
    (folder / "matrix_run.json").write_text(json.dumps(settings))


def _ood(folder: Path, verdicts: list[bool], finished: bool = True) -> None:
    """An ``eval_ood`` folder: problem i is right when verdicts[i] (the shift comes from the data's rows); finished:
    with its results.json, else an evaluation still running."""
    rows = [{"index": i, "correct": c, "completion": "#### 1"} for i, c in enumerate(verdicts)]
    write_jsonl(rows, folder / "eval_ood" / "samples.jsonl")
    if finished:
        (folder / "eval_ood" / "results.json").write_text("{}")


def _lab(tmp_path: Path, default_after: list[bool], random_after: list[bool] | None, more_after=None) -> Path:
    """A finished lab's folders from the early start: SFT, the default arm, its controls and (optionally) more SFT."""
    log = [{"step": s, "reward": 0.1 * s, "monitor/correct_rate": 0.3, "train_seconds": 10.0 * s} for s in (1, 2, 3, 4)]
    sft = tmp_path / "sft" / "sft_smollm2" / "seed0"
    _eval(tmp_path / "base" / "eval_test", [False] * N_PROBLEMS, 0.5)  # the pretrained model: the start's 'before'
    _run(sft, SOLVED_10, str(real.SFT_CONFIG), [{"step": 1, "loss": 1.0}])
    report = json.loads((sft / "report.json").read_text())
    report |= {"rows": 100, "validation": {"why": "reached 0.5", "last": 0.52, "last_step": 50}}
    (sft / "report.json").write_text(json.dumps(report))
    arms = {"grpo_real_default": default_after, "grpo_real_random": random_after, "grpo_real_format_only": SOLVED_10}
    for arm, after in arms.items():
        if after is not None:
            _run(
                tmp_path / "early" / "grpo" / arm / "seed0",
                after,
                f"recipes/configs/real_lab/{arm}.yaml",
                log,
            )
    if more_after is not None:
        more = tmp_path / "early" / "sft_smollm2_more" / "seed0"
        _run(more, more_after, str(real.MORE_SFT_CONFIG), [{"step": 1, "loss": 1.0, "train_seconds": 40.0}])
    return sft


N_PROBLEMS = 40
SOLVED_10 = [i < 10 for i in range(N_PROBLEMS)]
SOLVED_18 = [i < 18 for i in range(N_PROBLEMS)]


def test_report_gives_each_run_its_accuracies_intervals_and_paired_gain(tmp_path, drawn_curves):
    _lab(tmp_path, SOLVED_18, SOLVED_10)
    text = real.write_report(tmp_path, {"SFT": 10.0}).read_text()

    table = [line for line in text.splitlines() if "| grpo_real" in line and "[" in line]  # with intervals
    rows = {line.split(" | ")[1]: line for line in table}
    assert "+20.0 [" in rows["grpo_real_default"] and "0.250 [" in rows["grpo_real_default"]
    low, high = (float(x) for x in re.search(r"\+20\.0 \[([-+\d.]+), ([-+\d.]+)\]", rows["grpo_real_default"]).groups())
    assert 0 < low < 20 < high  # eight problems turned right, none wrong: the paired interval excludes 0
    assert "+0.0 [+0.0, +0.0]" in rows["grpo_real_random"]  # the same verdicts: no gain, no spread
    assert "stopped at step" in text and "reached 0.5" in text
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "python -m recipes.grpo --config recipes/configs/real_lab/grpo_real_default.yaml" in text
    assert "python -m recipes.sft --config recipes/configs/real_lab/sft_smollm2.yaml" in text


@pytest.mark.parametrize(
    "default_after, random_after, answer, control",
    [
        (SOLVED_18, SOLVED_10, "+20.0 points (every seed's interval above 0", "+0.0 points (within ±3)"),
        (SOLVED_18, [i < 2 for i in range(N_PROBLEMS)], "+20.0 points", "-20.0 points (OUTSIDE ±3: this rate moves"),
        (SOLVED_18, None, "+20.0 points", None),
        ([i < 11 for i in range(N_PROBLEMS)], SOLVED_10, "+2.5 points (not every seed's interval clear of 0", "within"),
        ([i < 4 for i in range(N_PROBLEMS)], SOLVED_10, "-15.0 points (every seed's interval below 0", "within"),
    ],
)
def test_report_leads_with_whether_grpo_beats_its_start_beside_its_controls(
    tmp_path, default_after, random_after, answer, control
):
    _lab(tmp_path, default_after, random_after)
    text = real.write_report(tmp_path, {}).read_text()
    lead = text.split("### From the early SFT start")[1].split("## The SFT starts")[0]
    assert "1. **Does GRPO beat its start?** Test (greedy, 1 seed(s)): " + answer in lead, lead
    assert "2. **Does it beat more SFT for the same compute?** Not measured yet" in lead
    assert "3. **Sharpening or new coverage?** Not measured" in lead
    if control is None:
        assert "random-reward control" not in lead
    else:
        assert "the random-reward control moved test accuracy " in lead and control in lead
    assert "format-only reward moved it +0.0 [+0.0, +0.0] points, its reward 0.100 → 0.400" in lead


def test_report_compares_grpo_with_more_sft_and_ood_by_shift(tmp_path):
    sft = _lab(tmp_path, SOLVED_18, SOLVED_10, more_after=[i < 30 for i in range(N_PROBLEMS)])
    shifts = ["more_steps"] * 20 + ["new_words"] * 20
    write_jsonl(
        [{"question": "q", "answer": "#### 1", "final": "1", "shift": s} for s in shifts],
        tmp_path / "data" / "ood.jsonl",
    )
    _ood(sft, [i < 5 or 20 <= i < 30 for i in range(40)])  # 5/20 more steps, 10/20 new words
    _ood(tmp_path / "early" / "grpo" / "grpo_real_default" / "seed0", [i < 15 or 20 <= i < 30 for i in range(40)])
    _ood(tmp_path / "early" / "sft_smollm2_more" / "seed0", [i < 5 or 20 <= i < 32 for i in range(40)])
    lead = real.write_report(tmp_path, {}).read_text().split("## The SFT starts")[0]
    # against its start: +10 on more steps, 0 on new words, +25 of 40 overall
    assert "Out of distribution: all +25.0 points (every seed's interval above 0" in lead
    assert "more steps +50.0; new words +0.0" in lead
    # against more SFT (30/40 on test against GRPO's 18/40): -30 points in-distribution, +10 more steps / -10 new words
    assert "GRPO minus more SFT, test: -30.0 points (every seed's interval below 0" in lead
    assert "more steps +50.0; new words -10.0" in lead
    assert "GRPO 40 s, 4 steps" in lead and "more SFT" in lead


def test_an_evaluation_still_running_and_a_start_still_training_give_no_figures(tmp_path):
    sft = _lab(tmp_path, SOLVED_18, SOLVED_10)
    write_jsonl(
        [{"question": "q", "answer": "#### 1", "final": "1", "shift": "more_steps"}] * 40,
        tmp_path / "data" / "ood.jsonl",
    )
    _ood(sft, [True] * 10, finished=False)  # 10 of 40 problems answered so far, all right: not an accuracy of 1.0
    plateau = tmp_path / "sft" / "sft_smollm2_plateau" / "seed0"
    plateau.mkdir(parents=True)
    write_jsonl([{"step": 5, "loss": 1.0, "train_seconds": 60.0}], plateau / "log.jsonl")
    text = real.write_report(tmp_path, {}).read_text()
    assert "OOD after – (all / by shift)" in text and "1.000" not in text
    assert "Out of distribution: not measured" in text
    assert "- **sft_smollm2_plateau**: not finished (no report.json yet)." in text
    assert "| sft_smollm2_plateau |" not in text  # no row of dashes for a start still training
    _ood(sft, [True] * 10 + [False] * 30)  # finished: now it counts
    assert "OOD after 0.250 / 0.250 (all / by shift)" in real.write_report(tmp_path, {}).read_text()


def test_the_plateau_start_shows_where_each_patience_stops_on_its_dev_curve(tmp_path):
    """The plateau rule read again on the start's own dev checks: the curve that chooses the patience, and which
    patiences it cannot judge because the run stopped first."""
    _lab(tmp_path, SOLVED_18, SOLVED_10)
    plateau = tmp_path / "sft" / "sft_smollm2_plateau" / "seed0"
    _run(plateau, SOLVED_18, str(real.CONFIG_DIR / "sft_smollm2_plateau.yaml"), [{"step": 1, "loss": 1.0}])
    dev = [0.40, 0.55, 0.50, 0.60, 0.52, 0.58, 0.57]  # the best at step 100, then three checks below it
    checks = [{"step": 25 * (i + 1), "accuracy": a, "n": 200} for i, a in enumerate(dev)]
    why = "plateau: 3 checks without a new best"
    validation = {"checks": checks, "why": why, "last": 0.57, "last_step": 175, "best": 0.6, "best_step": 100}
    report = json.loads((plateau / "report.json").read_text()) | {"rows": 100, "validation": validation}
    (plateau / "report.json").write_text(json.dumps(report))
    text = real.write_report(tmp_path, {}).read_text()
    line = next(line for line in text.splitlines() if "the plateau rule on its dev curve" in line)
    assert "2 checks, stops at step 150 keeping 0.600 (step 100)" in line  # 125 and 150 below the best
    assert "4 checks, goes on past step 175" in line and "16 checks, goes on past step 175" in line
    assert text.count("the plateau rule on its dev curve") == 1  # the early start stops on a level: no such line


def test_forgetting_is_given_for_every_arm_read_for_it_the_default_arm_first(tmp_path):
    _lab(tmp_path, SOLVED_18, SOLVED_10, more_after=SOLVED_18)
    for arm, kl in [("grpo/grpo_real_default", 0.0002), ("grpo/grpo_real_random", 0.0003), ("sft_smollm2_more", 0.12)]:
        reading = {"kl": {"mean": kl}, "delta_log_likelihood": {"mean": -kl, "ci": [-2 * kl, -kl / 2]}}
        (tmp_path / "early" / arm / "seed0" / "forgetting").mkdir()
        (tmp_path / "early" / arm / "seed0" / "forgetting" / "forgetting.json").write_text(json.dumps(reading))
    line = next(x for x in real.write_report(tmp_path, {}).read_text().splitlines() if x.startswith("Forgetting"))
    default, random, more = (
        line.index(f"{arm} seed 0 KL") for arm in ("grpo_real_default", "grpo_real_random", "sft_smollm2_more")
    )
    assert default < random < more and "grpo_real_format_only" not in line  # format-only: not read for it


def test_an_arm_still_training_is_named_as_unfinished_not_tabled_as_a_result(tmp_path):
    _lab(tmp_path, SOLVED_18, SOLVED_10)
    running = tmp_path / "early" / "sft_smollm2_more" / "seed0"  # killed or running: a log, no report.json
    running.mkdir(parents=True)
    write_jsonl([{"step": 5, "loss": 1.0, "train_seconds": 431.0}], running / "log.jsonl")
    partial = tmp_path / "early" / "grpo" / "grpo_real_dynamic" / "seed0"
    partial.mkdir(parents=True)
    write_jsonl([{"step": s, "reward": 0.5, "step_time": 40.0} for s in (1, 2)], partial / "log.jsonl")
    text = real.write_report(tmp_path, {}).read_text()
    assert (
        "- not finished (no report.json yet, so not in the table): early/sft_smollm2_more/seed0, 5 steps logged" in text
    )
    assert "| sft_smollm2_more |" not in text and "| 431 |" not in text  # no train seconds of a run cut short
    assert "| grpo_real_dynamic | 0 (unfinished, step 2) |" in text  # the monitors' table says it of its seed
    assert "| grpo_real_default | 0 |" in text  # a finished run's seed as before


def test_coverage_verdict_tells_sharpening_from_new_coverage(tmp_path):
    sft = _lab(tmp_path, SOLVED_18, SOLVED_10)
    grpo = tmp_path / "early" / "grpo" / "grpo_real_default" / "seed0"

    def sampled(folder, rights, name="eval_pass4"):  # 4 samples a problem; problem i has rights[i] right answers
        rows = [{"index": i, "samples": [{"correct": j < r} for j in range(4)]} for i, r in enumerate(rights)]
        write_jsonl(rows, folder / name / "samples.jsonl")
        (folder / name / "results.json").write_text("{}")

    sampled(sft, [1, 1, 0, 0])  # pass@1 0.125, pass@4 0.5
    write_jsonl([{"index": 0, "samples": [{"correct": True}] * 4}], grpo / "eval_pass4" / "samples.jsonl")
    assert "3. **Sharpening or new coverage?** Not measured" in real.write_report(tmp_path, {}).read_text()  # running
    sampled(grpo, [4, 4, 0, 0])  # sharper: pass@1 0.5, pass@4 still 0.5
    lead = real.write_report(tmp_path, {}).read_text()
    assert "3. **Sharpening or new coverage?** sharpening: pass@1 rose +37.5, pass@4 did not (+0.0)" in lead
    assert "Sampled: test pass@1 0.125, pass@4 0.500 (4 problems); OOD –." in lead  # the start's own line
    sampled(grpo, [4, 4, 2, 0])  # and a problem the start never solved: pass@4 0.75, but 1 problem of 4 (no claim)
    unclear = "pass@1 rose +50.0; pass@4 +25.0, its interval reaching 0 on 1 of 1 seed(s): sharpening, new coverage"
    assert unclear in real.write_report(tmp_path, {}).read_text()
    # the same K samples on the OOD problems: answered beside the test set's
    sampled(sft, [0, 0, 1, 0], "eval_ood_pass4")  # pass@1 0.0625, pass@4 0.25
    sampled(grpo, [0, 0, 1, 0], "eval_ood_pass4")  # the same: neither rose
    text = real.write_report(tmp_path, {}).read_text()
    assert f"**Sharpening or new coverage?** Test: {unclear}" in text
    assert "Out of distribution: pass@1 did not rise (+0.0; pass@4 +0.0)" in text
    assert "OOD pass@1 0.062, pass@4 0.250 (4 problems)." in text

    # the lab run again with a larger --passk: the answer takes the largest K the start and every arm finished
    def sampled8(folder, rights):
        rows = [{"index": i, "samples": [{"correct": j < r} for j in range(8)]} for i, r in enumerate(rights)]
        write_jsonl(rows, folder / "eval_pass8" / "samples.jsonl")
        (folder / "eval_pass8" / "results.json").write_text("{}")

    sampled8(sft, [2, 2, 0, 0])  # pass@1 0.125, pass@8 0.5; the arm's 8 samples still to come
    text = real.write_report(tmp_path, {}).read_text()
    assert f"Test: {unclear}" in text and "test pass@1 0.125, pass@8 0.500" in text
    sampled8(grpo, [8, 8, 0, 0])  # pass@1 0.5, pass@8 0.5: sharper, no new problem
    assert "Test: sharpening: pass@1 rose +37.5, pass@8 did not (+0.0)" in real.write_report(tmp_path, {}).read_text()
    sampled8(sft, [2] * 10 + [0] * 30)  # 40 problems: pass@8 0.25; the arm reaches 20 more, pass@8 0.75
    sampled8(grpo, [8] * 10 + [4] * 20 + [0] * 10)
    assert "Test: both rose: pass@1 +43.7, pass@8 +50.0 (new coverage" in real.write_report(tmp_path, {}).read_text()
    assert "More SFT" not in real.write_report(tmp_path, {}).read_text()  # no more-SFT run sampled yet
    more = tmp_path / "early" / "sft_smollm2_more" / "seed0"  # more SFT, sampled at the same K: beside GRPO's
    _run(more, SOLVED_10, "recipes/configs/real_lab/sft_smollm2_more.yaml", [{"step": 1, "train_seconds": 5.0}])
    sampled8(more, [8] * 40)  # every problem, every sample: pass@1 and pass@8 1.0 (the start 0.0625 and 0.25)
    text = real.write_report(tmp_path, {}).read_text()
    assert "More SFT for the same seconds, against the same start: seed 0: pass@1 +93.8 [" in text
    assert "], pass@8 +75.0 [" in text.split("More SFT for the same seconds")[1]


def test_the_lab_queues_every_arm_at_once_so_both_cores_stay_busy(tmp_path, monkeypatch):
    """Every start's GRPO runs and its more-SFT runs go to one queue, --jobs at a time, each run a process of its own
    from that start's SFT model (a control beside seed 0); a more-SFT run starts once its GRPO twin (the default arm,
    same seed) has finished, for the seconds that twin took, so both sides train beside another run."""
    import threading

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "lab"
    sfts, events, lock = [], [], threading.Lock()

    def fake_matrix(configs, seeds, folder, flags, **kw):
        made = []
        for config in configs:
            run = Path(folder) / Path(config).stem / f"seed{seeds[0]}"
            if "more" in config:
                with lock:
                    events.append(("more", run.parent.parent.name, seeds[0], flags, kw))
            else:
                with lock:
                    sfts.append(Path(config).stem)
                    events.append(("sft", Path(config).stem, seeds[0], flags, kw))
                assert flags[flags.index("--eval_limit") + 1] == "0"  # the lab reads the start, the recipe does not
            _run(run, SOLVED_10, config, [{"step": 1, "loss": 1.0}]) if not run.exists() else None
            made.append(run)
        return made

    def fake_pairs(pairs, folder, flags, **kw):
        [(config, seed)] = pairs  # one run a call: the lab's queue, not the matrix's, decides what runs beside what
        assert (Path(flags[flags.index("--model_name_or_path") + 1]) / "report.json").exists()  # its start trained
        log = [{"step": i, "train_seconds": 12.5 * i} for i in range(1, seed + 2)]  # seed s: s + 1 steps of 12.5 s
        _run(Path(folder) / Path(config).stem / f"seed{seed}", SOLVED_10, config, log)
        with lock:
            events.append(("grpo", Path(folder).parent.name, seed, flags, kw | {"arm": Path(config).stem}))

    def fake_evals(folder, base, data, args, threads=None):  # each model's readings: in the queue, after it trained
        with lock:
            events.append(("eval", folder, base, threads, (folder / "report.json").exists()))

    monkeypatch.setattr(real.matrix, "run_matrix", fake_matrix)
    monkeypatch.setattr(real.matrix, "run_pairs", fake_pairs)
    monkeypatch.setattr(real, "extra_evals", fake_evals)
    monkeypatch.setattr(real, "base_eval", lambda out, args, threads=None: events.append(("base", out, threads)))

    real.main(["--model", str(model), "--out", str(out), "--seeds", "0,1,2"])
    # both starts train in the queue, a process each beside the other, and a start's arms wait for it alone
    assert sorted(sfts) == ["sft_smollm2", "sft_smollm2_plateau"]
    assert all(e[4]["jobs"] == 2 and e[4]["progress"] is False for e in events if e[0] == "sft")
    for start, stem in real.STARTS.items():
        first = min(i for i, e in enumerate(events) if e[0] in ("grpo", "more") and e[1] == start)
        assert first > [i for i, e in enumerate(events) if e[:2] == ("sft", stem)][0]
    # every model is read on test once, by the lab: the recipes read nothing (--eval_limit 0), the arms in the queue
    # with its threads as soon as each has trained, the starts and the pretrained model there too (and again after
    # the queue, where a reading still missing is taken: here the fakes wrote none, so every one is asked again)
    queue = max(1, (os.cpu_count() or 1) // 2)
    assert all(e[3][e[3].index("--eval_limit") + 1] == "0" for e in events if e[0] in ("grpo", "more"))
    evals = [e for e in events if e[0] == "eval" and e[3] == queue]
    arms = [f for start in real.STARTS for f in (out / start).glob("*/*/seed*")] + list(
        out.glob("*/sft_smollm2_more/*")
    )
    assert sorted(e[1] for e in evals if e[2] is not None) == sorted(arms) and all(e[4] for e in evals)
    for start in real.STARTS:
        start_dir = out / "sft" / real.STARTS[start] / "seed0"
        assert [e[2] for e in evals if start in e[1].parts] == [start_dir] * 8  # an arm's base: its start
        assert [e[1] for e in evals if e[1] == start_dir] == [start_dir]  # the start itself, once in the queue
    assert [e for e in events if e[0] == "base"] == [("base", out, queue), ("base", out, None)]
    for start in real.STARTS:
        grpo = [(e[4]["arm"], e[2]) for e in events if e[0] == "grpo" and e[1] == start]
        assert sorted(grpo) == sorted(
            [("grpo_real_default", s) for s in (0, 1, 2)] + [("grpo_real_random", 0), ("grpo_real_format_only", 0)]
        )
        for kind, _, seed, flags, kw in (e for e in events if e[1] == start):
            assert kw["jobs"] == 2 and kw["progress"] is False  # a process each, beside one other
            sft_dir = out / "sft" / real.STARTS[start] / "seed0"
            assert flags[flags.index("--model_name_or_path") + 1] == str(sft_dir)
            if kind == "more":  # after its twin, for the twin's seconds
                order = [(e[0], e[2], e[4].get("arm")) for e in events if e[1] == start]
                assert order.index(("more", seed, None)) > order.index(("grpo", seed, "grpo_real_default"))
                assert flags[flags.index("--max_train_seconds") + 1] == f"{12.5 * (seed + 1):.1f}"
        assert sorted(e[2] for e in events if e[:2] == ("more", start)) == [0, 1, 2]
    splits = json.loads((out / "data" / "splits.json").read_text())
    assert splits["sizes"]["test"] == real.default_arm_config()["eval_limit"] == 500
    # each run the lab trained is timed beside it (the arms with the queue's threads), and the report tables the times
    for arm in arms:
        [line] = read_jsonl(arm / real.TIMES)
        assert (line["what"], line["threads"], line["resumed"]) == (arm.parent.name, queue, False)
        assert line["cpu"] == real.runner.cpu_kind() and line["seconds"] >= 0 and len(line["load"]) == 2
    assert [t["what"] for t in read_jsonl(out / "sft" / "sft_smollm2" / "seed0" / real.TIMES)] == ["sft_smollm2"]
    report = (out / "report.md").read_text()
    assert "| grpo_real_default | early | 3 |" in report and "| sft_smollm2_plateau | plateau start | 1 |" in report

    events.clear()  # --controls picks the controls: the random one alone here, from the early start only
    one = ["--model", str(model), "--seeds", "0", "--starts", "early"]
    real.main([*one, "--out", str(tmp_path / "random"), "--controls", "random"])
    [sft] = [e for e in events if e[0] == "sft"]  # one start: it trains first, in this process, on all its threads
    assert sft[4]["jobs"] == 1 and events.index(sft) == 0
    assert sorted(e[4]["arm"] for e in events if e[0] == "grpo") == ["grpo_real_default", "grpo_real_random"]
    events.clear()
    real.main([*one, "--out", str(tmp_path / "none"), "--controls", "", "--jobs", "1"])
    assert [e[4]["arm"] for e in events if e[0] == "grpo"] == ["grpo_real_default"]
    start_dir = tmp_path / "none" / "sft" / "sft_smollm2" / "seed0"  # read before its arms train: a lab stopped part
    first_arm = next(i for i, e in enumerate(events) if e[0] in ("grpo", "more"))  # way has what they are read against
    assert next(i for i, e in enumerate(events) if e[0] == "eval" and e[1] == start_dir) < first_arm
    events.clear()  # --control-seeds: a control on each seed a claim rests on
    real.main([*one[:2], "--seeds", "0,1", "--starts", "early", "--out", str(tmp_path / "c"), "--control-seeds", "0,1"])
    runs = sorted((e[4]["arm"], e[2]) for e in events if e[0] == "grpo")
    assert [run for run in runs if run[0] != "grpo_real_default"] == [
        ("grpo_real_format_only", 0),
        ("grpo_real_format_only", 1),
        ("grpo_real_random", 0),
        ("grpo_real_random", 1),
    ]
    assert splits["solution_overlap_with_train"]["solution_rule"] == {"dev": 0, "test": 0, "ood": 0}


def test_a_stage_is_timed_beside_it_once_it_ends_and_a_reused_run_is_not(tmp_path, monkeypatch):
    """``clocked`` adds a line to the folder's ``lab_times.jsonl`` for a stage that ran to its end: none for a run
    finished earlier (reused) or a stage that failed; a run that found a checkpoint is marked resumed. An evaluation
    (``_eval``) is timed in its model's folder. The report tables them per stage and start, resumed ones out of the
    mean."""
    fresh, reused, resumed = (tmp_path / "lab" / "early" / "grpo" / name / "seed0" for name in ("a", "b", "c"))
    (reused / "report.json").parent.mkdir(parents=True)
    (reused / "report.json").write_text("{}")
    (resumed / "checkpoint-8").mkdir(parents=True)
    for folder in (fresh, reused, resumed):
        with real.clocked(folder, "grpo_real_default", 1, training=True):
            pass
    with pytest.raises(RuntimeError), real.clocked(fresh, "eval_test", 1):
        raise RuntimeError("a failed evaluation")
    assert not (reused / real.TIMES).exists()
    assert [line["resumed"] for line in read_jsonl(fresh / real.TIMES)] == [False]
    assert [line["resumed"] for line in read_jsonl(resumed / real.TIMES)] == [True]

    calls = []
    monkeypatch.setattr(real.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    real._eval(["run", "--data", "x.jsonl"], fresh / "eval_ood.log", threads=2)
    assert calls and [(t["what"], t["threads"]) for t in read_jsonl(fresh / real.TIMES)][1:] == [("eval_ood", 2)]
    (fresh / "eval_pass8").mkdir()
    (fresh / "eval_pass8" / "samples.jsonl").write_text('{"index": 0}\n')  # left by an evaluation stopped part way
    real._eval(["run", "--data", "x.jsonl"], fresh / "eval_pass8.log")
    assert read_jsonl(fresh / real.TIMES)[-1]["resumed"] and not read_jsonl(fresh / real.TIMES)[-2]["resumed"]

    text = "\n".join(time_lines(tmp_path / "lab"))
    assert "| grpo_real_default | early | 2 (1 resumed, not in the mean) | 0 | – | 1 |" in text
    assert "| eval_ood | early | 1 | 0 | – | 2 |" in text and real.runner.cpu_kind() in text
    assert "no stage timed yet" in time_lines(tmp_path / "empty")[0]


def test_a_failed_run_of_the_queue_stops_its_twin_not_the_others():
    """A failed GRPO run fails the more-SFT run that waits for its seconds; the other runs still run; the error names
    both. In turn (jobs 1) as at two a time."""
    for jobs in (1, 2):
        ran = []

        def ok(name, ran=ran):
            return lambda: ran.append(name)

        def broken():
            raise RuntimeError("exit 1")

        tasks = [(("early", "grpo_real_default", 0), None, broken), (("early", "grpo_real_random", 0), None, ok("r"))]
        tasks += [(("early", "sft_smollm2_more", 0), ("early", "grpo_real_default", 0), ok("more"))]
        tasks += [(("plateau", "grpo_real_default", 0), None, ok("p"))]
        with pytest.raises(RuntimeError) as error:
            real.run_tasks(tasks, jobs)
        assert sorted(ran) == ["p", "r"]
        assert "2 run(s) of the lab failed" in str(error.value) and "early/sft_smollm2_more/0" in str(error.value)


def test_a_screen_runs_the_default_arm_and_its_control_on_dev_for_each_setting_then_stops(tmp_path, monkeypatch):
    """--screen: the first start only, then per setting the default arm and the random control, read before and after
    on dev (never test), the setting's options appended; no arms, no more SFT, no other evaluation; screen.md."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out, sfts, queued = tmp_path / "lab", [], []

    def fake_matrix(configs, seeds, folder, flags, **kw):
        sfts.extend(Path(c).stem for c in configs)
        run = Path(folder) / Path(configs[0]).stem / f"seed{seeds[0]}"
        _run(run, SOLVED_10, configs[0], [{"step": 1, "loss": 1.0}]) if not run.exists() else None
        return [run]

    def fake_pairs(pairs, folder, flags, **kw):
        queued.append((pairs, Path(folder), flags))
        lifted = SOLVED_18 if "--beta" in flags else SOLVED_10
        for config, seed in pairs:  # the default arm lifts dev at beta 0.3; the control drifts at the configs' setting
            after = lifted if "default" in config else (SOLVED_10 if "--beta" in flags else [i < 15 for i in range(40)])
            run = Path(folder) / Path(config).stem / f"seed{seed}"
            _run(run, after, config, [{"step": 1}], before=SOLVED_10) if not run.exists() else None

    monkeypatch.setattr(real.matrix, "run_matrix", fake_matrix)
    monkeypatch.setattr(real.matrix, "run_pairs", fake_pairs)
    monkeypatch.setattr(real, "extra_evals", lambda *a, **k: pytest.fail("a screen evaluates nothing else"))
    monkeypatch.setattr(real, "base_eval", lambda *a, **k: pytest.fail("a screen evaluates nothing else"))

    report = real.main(["--model", str(model), "--out", str(out), "--screen", "", "--screen", "beta=0.3"])
    assert sfts == ["sft_smollm2"]  # the early start alone, not the plateau
    assert [folder.relative_to(out).as_posix() for _, folder, _ in queued] == [
        "screen/early/as_configured/grpo",
        "screen/early/beta=0.3/grpo",
    ]
    for pairs, _, flags in queued:
        assert [(Path(c).stem, seed) for c, seed in pairs] == [("grpo_real_default", 0), ("grpo_real_random", 0)]
        assert flags[flags.index("--eval_data") + 1] == str(out / "data" / "dev.jsonl") and "test.jsonl" not in flags
        assert flags[flags.index("--eval_limit") + 1] == str(real.DEV_SIZE)
    assert queued[1][2][-2:] == ["--beta", "0.3"] and "--beta" not in queued[0][2]
    text = report.read_text()
    rows = {line.split(" | ")[1].strip("`"): line for line in text.splitlines() if line.startswith("| early | `")}
    assert "+12.5 [" in rows["as_configured"] and "control within ±3 on 0 of 1 seed(s)" in rows["as_configured"]
    assert "+20.0 [" in rows["beta=0.3"] and "on 1 of 1 seed(s); the default arm lifts: a candidate" in rows["beta=0.3"]
    assert not (out / "early").exists() and report == out / "screen" / "screen.md"
    assert real.main(["--report-only", "--out", str(out)]) == out / "report.md"  # and screen.md again
    assert (out / "screen" / "screen.md").read_text() == text
    queued.clear()  # the control on more seeds: the default arm's seed 0 is reused by the matrix (faked here: rerun)
    report = real.main(["--model", str(model), "--out", str(out), "--screen", "beta=0.3", "--control-seeds", "0,1"])
    assert [(Path(c).stem, seed) for c, seed in queued[0][0]] == [
        ("grpo_real_default", 0),
        ("grpo_real_random", 0),
        ("grpo_real_random", 1),
    ]
    row = next(line for line in report.read_text().splitlines() if line.startswith("| early | `beta=0.3`"))
    assert "(seed 0); +0.0 [+0.0, +0.0] (seed 1)" in row and "control within ±3 on 2 of 2 seed(s)" in row
    queued.clear()  # from the plateau: its own start, its own folders, its rows beside the early start's
    report = real.main(["--model", str(model), "--out", str(out), "--starts", "plateau", "--screen", "beta=0.3"])
    assert sfts[-1] == "sft_smollm2_plateau" and [folder.relative_to(out).as_posix() for _, folder, _ in queued] == [
        "screen/plateau/beta=0.3/grpo"
    ]
    start = queued[0][2][queued[0][2].index("--model_name_or_path") + 1]
    assert Path(start).parent.name == "sft_smollm2_plateau"
    starts = [line.split(" | ")[0].strip("| ") for line in report.read_text().splitlines() if "| `" in line]
    assert starts == ["early", "early", "plateau"]


def test_sampling_arms_join_each_start_on_the_first_seed_the_filtered_one_on_its_own_pool(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out, queued, filtered, pools = tmp_path / "lab", [], [], []

    def fake_matrix(configs, seeds, folder, flags, **kw):
        made = []
        for config in configs:
            run = Path(folder) / Path(config).stem / f"seed{seeds[0]}"
            if "filtered" in config:
                filtered.append((Path(folder).parent.name, seeds, flags[flags.index("--model_name_or_path") + 1]))
                filtered[-1] += (flags[len(flags) - 1 - flags[::-1].index("--data") + 1],)  # the last --data
            log = [{"step": 1, "loss": 1.0, "train_seconds": 5.0}]
            _run(run, SOLVED_10, config, log) if not run.exists() else None
            made.append(run)
        return made

    def fake_pairs(pairs, folder, flags, **kw):
        queued.extend((Path(folder).parent.name, Path(config).stem, seed) for config, seed in pairs)
        for config, seed in pairs:
            log = [{"step": 1, "train_seconds": 5.0}]
            _run(Path(folder) / Path(config).stem / f"seed{seed}", SOLVED_10, config, log)

    def fake_pool(start, data, folder, problems):
        pools.append((start.parts[-3:], problems))
        return None if "plateau" in str(start) else folder / "train.jsonl"  # the plateau start leaves no problem

    monkeypatch.setattr(real.matrix, "run_matrix", fake_matrix)
    monkeypatch.setattr(real.matrix, "run_pairs", fake_pairs)
    monkeypatch.setattr(real, "extra_evals", lambda *a, **k: None)
    monkeypatch.setattr(real, "base_eval", lambda *a, **k: None)
    monkeypatch.setattr(real, "filtered_pool", fake_pool)
    real.main(["--model", str(model), "--out", str(out), "--seeds", "3,4", "--sampling-arms", "dynamic,filtered"])
    for start in real.STARTS:  # the dynamic arm from each start, once, on the first seed
        assert [run for run in queued if run[0] == start and "dynamic" in run[1]] == [(start, "grpo_real_dynamic", 3)]
    assert pools == [(("sft", "sft_smollm2", "seed3"), 512), (("sft", "sft_smollm2_plateau", "seed3"), 512)]
    early_start = str(out / "sft" / "sft_smollm2" / "seed3")  # the starts take the first seed
    assert filtered == [("early", [3], early_start, str(out / "early" / "filtered" / "train.jsonl"))]


def test_arm_options_reach_every_grpo_arm_from_their_start_and_nothing_else(tmp_path, monkeypatch):
    """--arm-options plateau:...: the plateau's GRPO arms (default, controls, dynamic, filtered) take the options after
    the lab's flags; the early start's arms and every more-SFT run do not."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out, seen = tmp_path / "lab", {}

    def record(configs_seeds, folder, flags):
        for config, seed in configs_seeds:
            seen[(Path(folder).parent.name, Path(config).stem, seed)] = list(flags)
            run = Path(folder) / Path(config).stem / f"seed{seed}"
            _run(run, SOLVED_10, config, [{"step": 1, "loss": 1.0, "train_seconds": 5.0}]) if not run.exists() else None
            (run / "matrix_run.json").write_text(
                json.dumps({"config": config, "seed": seed, "extra_args": list(flags)})
            )

    def fake_matrix(configs, seeds, folder, flags, **kw):
        record([(c, seeds[0]) for c in configs], folder, flags)
        return [Path(folder) / Path(c).stem / f"seed{seeds[0]}" for c in configs]

    monkeypatch.setattr(real.matrix, "run_matrix", fake_matrix)
    monkeypatch.setattr(real.matrix, "run_pairs", lambda pairs, folder, flags, **kw: record(pairs, folder, flags))
    monkeypatch.setattr(real, "extra_evals", lambda *a, **k: None)
    monkeypatch.setattr(real, "base_eval", lambda *a, **k: None)
    monkeypatch.setattr(real, "filtered_pool", lambda start, data, folder, problems: folder / "train.jsonl")
    chosen = ["--arm-options", "plateau:learning_rate=1.5e-5,beta=0.01", "--sampling-arms", "dynamic,filtered"]
    real.main(["--model", str(model), "--out", str(out), "--steps", "3", *chosen])
    grpo = {key: flags for key, flags in seen.items() if key[1].startswith("grpo_real")}
    assert {arm for start, arm, _ in grpo if start == "plateau"} == {
        *("grpo_real_default", "grpo_real_random", "grpo_real_format_only"),
        *("grpo_real_dynamic", "grpo_real_filtered"),
    }
    for (start, arm, _), flags in grpo.items():
        chosen_here = " --learning_rate 1.5e-5 --beta 0.01" in " ".join(flags)  # after the lab's --max_steps
        assert chosen_here == (start == "plateau"), (start, arm, flags)
        assert flags[flags.index("--max_steps") + 1] == "3"
        assert not chosen_here or flags.index("--learning_rate") > flags.index("--max_steps")
    assert not any("--learning_rate" in flags for key, flags in seen.items() if not key[1].startswith("grpo_real"))
    early, plateau = (out / "report.md").read_text().split("### From the plateau SFT start")
    said = "The default arm's options beyond its config: "
    assert f"{said}`max_steps=3,learning_rate=1.5e-5,beta=0.01`." in plateau and f"{said}`max_steps=3`." in early
    # unnamed, a start takes ARM_OPTIONS (the plateau's rate chosen on dev); 'START:' the configs as they are
    for flags, rate in ([], ["1.5e-5"]), (["--arm-options", "plateau:"], []):
        seen.clear()
        real.main(["--model", str(model), "--out", str(tmp_path / f"lab{len(flags)}"), "--controls", "", *flags])
        plateau, early = seen[("plateau", "grpo_real_default", 0)], seen[("early", "grpo_real_default", 0)]
        assert plateau[plateau.index("--learning_rate") + 1 :] == rate if rate else "--learning_rate" not in plateau
        assert "--learning_rate" not in early


def test_dpo_runs_from_each_start_on_its_own_rollouts(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out, sampled, dpo = tmp_path / "lab", [], []

    def fake_matrix(configs, seeds, folder, flags, **kw):
        made = []
        for config in configs:
            run = Path(folder) / Path(config).stem / f"seed{seeds[0]}"
            if "dpo" in config:
                model_flag = flags[len(flags) - 1 - flags[::-1].index("--model_name_or_path") + 1]
                dpo.append(
                    (Path(folder).relative_to(out), model_flag, flags[len(flags) - 1 - flags[::-1].index("--data") + 1])
                )
            _run(run, SOLVED_10, config, [{"step": 1, "train_seconds": 5.0}]) if not run.exists() else None
            made.append(run)
        return made

    def fake_pairs(pairs, folder, flags, **kw):
        for config, seed in pairs:
            log = [{"step": 1, "train_seconds": 5.0}]
            _run(Path(folder) / Path(config).stem / f"seed{seed}", SOLVED_10, config, log)

    def fake_rollouts(start, data, folder, limit):
        sampled.append((start.parent.name, folder.relative_to(out)))
        return folder / "rollouts.jsonl"

    monkeypatch.setattr(real.matrix, "run_matrix", fake_matrix)
    monkeypatch.setattr(real.matrix, "run_pairs", fake_pairs)
    monkeypatch.setattr(real, "extra_evals", lambda *a, **k: None)
    monkeypatch.setattr(real, "base_eval", lambda *a, **k: None)
    monkeypatch.setattr(real, "sample_rollouts", fake_rollouts)
    real.main(["--model", str(model), "--out", str(out), "--dpo"])
    assert sampled == [("sft_smollm2", Path("early/rollouts")), ("sft_smollm2_plateau", Path("plateau/rollouts"))]
    assert dpo == [
        (
            Path("early/dpo"),
            str(out / "sft" / "sft_smollm2" / "seed0"),
            str(out / "early" / "rollouts" / "rollouts.jsonl"),
        ),
        (
            Path("plateau/dpo"),
            str(out / "sft" / "sft_smollm2_plateau" / "seed0"),
            str(out / "plateau" / "rollouts" / "rollouts.jsonl"),
        ),
    ]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sampling-arms", "online"], "give one or more of dynamic,filtered"),
        (["--controls", "random,shuffled"], "--controls shuffled: give one or more of random,format_only"),
    ],
)
def test_unknown_sampling_arm_or_control_is_one_clear_error(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as err:
        real.main([*flags, "--out", str(tmp_path / "lab")])
    assert err.value.code == 2 and message in capsys.readouterr().err


def test_a_data_folder_split_on_questions_is_refused(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "lab" / "data").mkdir(parents=True)
    (tmp_path / "lab" / "data" / "heldout.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit) as err:
        real.main(["--model", str(model), "--out", str(tmp_path / "lab")])
    assert err.value.code == 2 and "split on the question text alone" in capsys.readouterr().err


def test_missing_model_is_one_clear_error_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        real.main(["--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "lab")])
    assert err.value.code == 2
    assert "make real-model" in capsys.readouterr().err
    assert not (tmp_path / "lab").exists()  # no data written, no stage started


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seeds", "0,x"], "whole numbers"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--control-seeds", "0,one"], "--control-seeds '0,one': give whole numbers"),
        (["--control-seed", "1"], "unrecognized arguments: --control-seed 1"),  # an abbreviation is not taken
        (["--screen", "beta"], "--screen 'beta': 'beta' is not a GRPO setting to choose (give KEY=VALUE"),
        (["--screen", "betta=0.3"], "'betta=0.3' is not a GRPO setting to choose (give KEY=VALUE with an option"),
        (["--screen", "beta=0.3,eval_data=t.jsonl"], "'eval_data=t.jsonl' is not a GRPO setting to choose (set by"),
        (["--arm-options", "learning_rate=1e-5"], "give START:KEY=VALUE (name one of early, plateau once)"),
        (["--arm-options", "late:beta=0.3"], "--arm-options 'late:beta=0.3': give START:KEY=VALUE (name one of"),
        (["--arm-options", "plateau:beta=0.1", "--arm-options", "plateau:beta=0.2"], "(named twice)"),
        (["--arm-options", "plateau:lr=1e-5"], "--arm-options 'lr=1e-5': 'lr=1e-5' is not a GRPO setting to choose"),
    ],
)
def test_bad_flags_are_one_clear_error_before_anything_runs(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as err:
        real.main([*flags, "--out", str(tmp_path / "lab")])
    assert err.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "lab").exists()


def test_report_only_without_runs_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="python -m cpu_lab.real"):
        real.main(["--report-only", "--out", str(tmp_path)])


@pytest.mark.slow
def test_real_lab_mechanics_on_smollm2(tmp_path, drawn_curves):
    """Every stage on the real model for a step or two (the mechanics, not the gain): both SFT starts through
    recipes.sft, from each the GRPO arms (LoRA) through recipes.grpo two at a time with their monitors and probes,
    more SFT for the default arm's seconds, and every model (the pretrained one on test only) read once on test and
    on the OOD set, pass@k, forgetting."""
    from recipes.real_model import require_real_model

    model = require_real_model()
    out = tmp_path / "real"
    cmd = [sys.executable, "-m", "cpu_lab.real", "--model", str(model), "--out", str(out)]
    cmd += ["--seeds", "0,1", "--steps", "1", "--sft-steps", "2", "--eval-limit", "4", "--ood-limit", "6"]
    cmd += ["--passk", "2", "--passk-limit", "3", "--forgetting-limit", "2"]
    cmd += ["--sampling-arms", "dynamic,filtered", "--filter-problems", "4"]
    env = os.environ | {"OMP_NUM_THREADS": "2"}
    # its own process group: on a timeout the lab's runs (its children) stop with it, not beside the next test
    lab = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = lab.communicate(timeout=3600)
    except subprocess.TimeoutExpired:
        os.killpg(lab.pid, signal.SIGKILL)
        stdout, stderr = lab.communicate()
        pytest.fail(f"the lab's mechanics ran past an hour: {stdout[-2000:]}{stderr[-2000:]}")
    assert lab.returncode == 0, stdout[-3000:] + stderr[-3000:]

    def test_n(folder):  # the lab's one reading of the test set; the recipes read none (no before/after)
        assert not {"before", "after"} & json.loads((folder / "report.json").read_text()).keys()
        return json.loads((folder / "eval_test" / "results.json").read_text())["n"]

    assert json.loads((out / "base" / "eval_test" / "results.json").read_text())["n"] == 4  # the starts' 'before'
    for start, config in real.STARTS.items():
        sft_dir = out / "sft" / config / "seed0"
        assert json.loads((sft_dir / "report.json").read_text())["steps"] == 2 and test_n(sft_dir) == 4
        assert json.loads((sft_dir / "eval_ood" / "results.json").read_text())["n"] == 6
        assert json.loads((sft_dir / "eval_ood_pass2" / "results.json").read_text())["n"] == 3  # --passk-limit
        arms = {("grpo_real_default", s) for s in (0, 1)} | {("grpo_real_random", 0), ("grpo_real_format_only", 0)}
        for arm, seed in arms:
            folder = out / start / "grpo" / arm / f"seed{seed}"
            settings = json.loads((folder / "matrix_run.json").read_text())
            assert str(sft_dir) in settings["extra_args"]  # GRPO starts from this start's SFT model
            rows = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
            assert any("monitor/correct_rate" in r and "monitor/degenerate_share" in r for r in rows)
            assert json.loads((folder / "probes.json").read_text())
            assert test_n(folder) == 4
            assert (folder / "adapter_config.json").exists()  # LoRA: the run saved an adapter, not a whole model
            assert json.loads((folder / "eval_ood" / "results.json").read_text())["n"] == 6
            assert json.loads((folder / "forgetting" / "forgetting.json").read_text())["kl"]["mean"] >= 0
        for seed in (0, 1):
            more = json.loads((out / start / "sft_smollm2_more" / f"seed{seed}" / "report.json").read_text())
            assert more["stopped_on_seconds"] and more["train_seconds"] > 0
            assert test_n(out / start / "sft_smollm2_more" / f"seed{seed}") == 4
        dynamic = out / start / "grpo" / "grpo_real_dynamic" / "seed0"
        rows = [json.loads(line) for line in (dynamic / "log.jsonl").read_text().splitlines()]
        assert any("dynamic_sampling/dropped_share" in r for r in rows) and test_n(dynamic) == 4
        pool = json.loads((out / start / "filtered" / "filter.json").read_text())
        assert pool["problems"] == 4 and pool["k"] == real.FILTER_K and pool["sampling_seconds"] > 0
        filtered = out / start / "grpo" / "grpo_real_filtered" / "seed0"
        assert (filtered / "report.json").exists() == (pool["kept"] > 0)  # no pool, no arm
        assert (filtered / "eval_test" / "results.json").exists() == (pool["kept"] > 0)
    text = (out / "report.md").read_text()
    assert (
        text.count("1. **Does GRPO beat its start?**") == 2 and "Sharpening or new coverage?** Not measured" not in text
    )
    assert (out / "curves.png").exists()
    # a screen on dev from the same lab: the finished early start reused, two GRPO runs with the setting, screen.md
    screen = [*cmd[:7], "--steps", "1", "--sft-steps", "2", "--eval-limit", "4", "--starts", "early"]
    screen += ["--screen", "beta=0.3"]
    done = subprocess.run(screen, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sft_smollm2/seed0: finished earlier with the same settings, skipped" in done.stdout
    for arm in ("grpo_real_default", "grpo_real_random"):
        folder = out / "screen" / "early" / "beta=0.3" / "grpo" / arm / "seed0"
        assert json.loads((folder / "resolved_config.json").read_text())["beta"] == 0.3
        assert json.loads((folder / "report.json").read_text())["after"]["n"] == 4
    assert "`beta=0.3`" in (out / "screen" / "screen.md").read_text()


def test_summary_gives_first_and_last_quarter_of_the_monitors(tmp_path):
    folder = tmp_path / "run"
    log = [{"step": s, "reward": 0.0, "rewards/gsm8k_format_reward/mean": 0.01 * s} for s in range(1, 9)]
    log = [r | {"monitor/degenerate_all_wrong_share": 1.0 if r["step"] <= 4 else 0.5} for r in log]
    config = "recipes/configs/real_lab/grpo_gsm8k_smollm2.yaml"
    _run(folder, [True, False, False, False], config, log, before=[False] * 4)  # a run by hand: the recipe's evals
    text = real.run_summary(folder)
    assert "| rewards/gsm8k_format_reward/mean | 0.015 | 0.075 |" in text  # steps 1-2 and 7-8 of 8
    assert "| monitor/degenerate_all_wrong_share | 1.000 | 0.500 |" in text
    assert "0.000 [" in text and "-> 0.250 [" in text


def test_report_sets_online_dynamic_sampling_and_the_offline_filtered_pool_against_the_default_arm(tmp_path):
    _lab(tmp_path, SOLVED_18, SOLVED_10)
    log = [
        {"step": s, "reward": 0.5, "monitor/degenerate_share": 0.75, "train_seconds": 30.0 * s} for s in (1, 2, 3, 4)
    ]
    default = tmp_path / "early" / "grpo" / "grpo_real_default" / "seed0"
    write_jsonl(log, default / "log.jsonl")
    dynamic = tmp_path / "early" / "grpo" / "grpo_real_dynamic" / "seed0"
    dynamic_log = [
        r
        | {"dynamic_sampling/dropped_share": 0.5, "dynamic_sampling/extra_rounds": e, "train_seconds": 50.0 * r["step"]}
        for r, e in zip(log, (1, 2, 1, 0), strict=True)
    ]
    _run(
        dynamic,
        [i < 22 for i in range(N_PROBLEMS)],
        "recipes/configs/real_lab/grpo_real_dynamic.yaml",
        dynamic_log,
    )
    filtered = tmp_path / "early" / "grpo" / "grpo_real_filtered" / "seed0"
    _run(
        filtered,
        [i < 14 for i in range(N_PROBLEMS)],
        "recipes/configs/real_lab/grpo_real_filtered.yaml",
        log,
    )
    pool = {"problems": 64, "kept": 20, "degenerate_share_before": 0.7, "degenerate_share_after": 0.2}
    (tmp_path / "early" / "filtered").mkdir(parents=True)
    (tmp_path / "early" / "filtered" / "filter.json").write_text(json.dumps(pool | {"sampling_seconds": 95.0}))
    (tmp_path / "early" / "filtered" / "sample.command.txt").write_text("python -m training_data.rollouts sample\n")
    text = real.write_report(tmp_path, {}).read_text()
    lead = text.split("### From the early SFT start")[1].split("## The SFT starts")[0]
    line = next(line for line in lead.splitlines() if line.startswith("Groups that teach nothing"))
    assert "the default arm (seed 0) trained on 75% degenerate groups at its start" in line
    # dynamic: 22/40 against the start's 10/40 (+30), against the default arm's 18/40 (+10); 200 s against 120 s
    assert "online dynamic sampling (seed 0) dropped 50% of the groups it generated at its start, 1.00 extra" in line
    dynamic_part = line.split("online dynamic sampling")[1].split("; the offline")[0]
    assert (
        "test +30.0 [" in dynamic_part and ", +10.0 [" in dynamic_part and "(200 s of training against 120 s)" in line
    )
    # filtered: 14/40 (+10 against the start, -10 against the default arm), its pool's counts and sampling seconds
    assert "(seed 0; 20 of 64 problems kept, expected degenerate share 70% → 20%, 95 s of sampling)" in line
    assert "test +10.0 [" in line.split("offline-filtered pool")[1] and "-10.0 [" in line.split("offline-filtered")[1]
    assert "python -m training_data.rollouts sample" in text  # the pool's command among the ones that reproduce
    assert "| grpo_real_dynamic |" in text and "| grpo_real_filtered |" in text  # in the table of every run


def test_report_says_nothing_of_sampling_arms_that_did_not_run(tmp_path):
    _lab(tmp_path, SOLVED_18, SOLVED_10)
    assert "Groups that teach nothing" not in real.write_report(tmp_path, {}).read_text()


def test_grpo_and_more_sft_are_read_on_the_same_problems_in_the_same_tokens():
    """The report sets GRPO's test answers against more SFT's, problem by problem: both must be evaluated alike, or
    the side with fewer new tokens loses the answers that need more (64 against GRPO's 32 did)."""
    from recipes.parser import load_config

    grpo, more = real.default_arm_config(), load_config(real.MORE_SFT_CONFIG)
    for key in ("eval_task", "eval_data", "eval_limit", "eval_max_new_tokens"):
        assert more[key] == grpo[key], key


def test_controls_on_several_seeds_say_on_how_many_they_held(tmp_path):
    log = [{"step": 1, "reward": 0.1, "monitor/correct_rate": 0.3, "train_seconds": 10.0}]
    _lab(tmp_path, SOLVED_18, SOLVED_10)  # the random control on seed 0: +0.0
    seed1 = tmp_path / "early" / "grpo" / "grpo_real_random" / "seed1"
    _run(seed1, SOLVED_18, "recipes/configs/real_lab/grpo_real_random.yaml", log)  # seed 1: +20.0
    lead = real.write_report(tmp_path, {}).read_text().split("## The SFT starts")[0]
    assert "the random-reward control held within ±3 on 1 of 2 seeds" in lead
    assert "+0.0 points (within ±3) on seed 0" in lead and "+20.0 points (OUTSIDE ±3: this rate" in lead


def test_ood_reads_of_part_of_the_set_take_every_shift_in_turn(tmp_path, monkeypatch):
    """``ood.jsonl`` is one block per shift: a read of its first N problems (greedy with --ood-limit, pass@K with
    --passk-limit) takes them from each shift in turn, or it would read the first shift alone."""
    data = tmp_path / "data"
    rows = [{"question": f"{shift} {i}", "answer": str(i), "shift": shift} for shift in "abc" for i in range(3)]
    write_jsonl(rows, data / "ood.jsonl")
    assert real.ood_subset(data, 9) == data / "ood.jsonl"  # the whole set: the file itself
    four = real.ood_subset(data, 4)
    assert [r["question"] for r in real.read_jsonl(four)] == ["a 0", "b 0", "c 0", "a 1"]
    write_jsonl(rows[::-1], data / "ood.jsonl")
    assert real.read_jsonl(real.ood_subset(data, 4))[0]["question"] == "a 0"  # written once: later reads are the same
    commands = []
    monkeypatch.setattr(real, "_eval", lambda cmd, log, threads=None: commands.append(cmd))
    args = real.argparse.Namespace(
        out=str(tmp_path), eval_limit=None, ood_limit=4, passk=2, passk_limit=3, forgetting_data=""
    )
    real.extra_evals(tmp_path / "model", None, data, args)
    read = {cmd[cmd.index("--out") + 1].rsplit("/", 1)[-1]: cmd[cmd.index("--data") + 1] for cmd in commands}
    assert read["eval_ood"] == str(four) and read["eval_ood_pass2"] == str(data / "ood_first3.jsonl")
    assert [r["shift"] for r in real.read_jsonl(data / "ood_first3.jsonl")] == ["c", "b", "a"]
    batch = {cmd[cmd.index("--out") + 1].rsplit("/", 1)[-1]: "--batch-size" in cmd for cmd in commands}
    assert batch == {"eval_test": False, "eval_ood": False, "eval_pass2": True, "eval_ood_pass2": True}  # K a call


def test_between_its_queue_lines_the_lab_names_each_run_in_training_with_its_step(tmp_path, capsys):
    going = tmp_path / "early" / "grpo" / "grpo_real_default" / "seed0"
    going.mkdir(parents=True)
    (going / "resolved_config.json").write_text(json.dumps({"max_steps": 36}))
    torn = '{"step": 11, "train_seconds": 1100.0}\n{"step": 12, "train_seconds": 1248.0}\n{"step": 1'
    (going / "log.jsonl").write_text(torn)  # a write under way
    finished = tmp_path / "sft" / "sft_smollm2" / "seed0"
    finished.mkdir(parents=True)
    (finished / "log.jsonl").write_text('{"step": 15, "train_seconds": 300.0}\n')
    (finished / "report.json").write_text("{}")
    killed = tmp_path / "early" / "grpo" / "grpo_real_random" / "seed0"  # left by a lab stopped an hour ago
    killed.mkdir(parents=True)
    (killed / "log.jsonl").write_text('{"step": 3, "train_seconds": 300.0}\n')
    os.utime(killed / "log.jsonl", (time.time() - 3600, time.time() - 3600))
    text = real.training_now(tmp_path, time.monotonic() - 125)
    assert text == "[real] 2 min: training early/grpo/grpo_real_default/seed0 step 12/36, 104 s of training a step"
    (going / "report.json").write_text("{}")
    assert real.training_now(tmp_path, time.monotonic()) == ""  # nothing in training: no line
    said = iter(["tick", "", "tock"])
    with real.every(0.01, lambda: next(said, "")):
        time.sleep(0.3)
    time.sleep(0.05)
    assert capsys.readouterr().out == "tick\ntock\n"  # an empty line is not printed; none after the block


def test_the_labs_progress_stays_on_the_console_while_a_run_in_its_process_writes_to_its_log(tmp_path, capfd):
    # --jobs 1 (or a single SFT start) runs a recipe inside the lab's process, its output sent to run.log
    said = iter(["[real] 10 min: training sft step 30/1250", "[real] 20 min: training sft step 60/1250"])
    with real.every(0.05, lambda: next(said, "")), runner.output_to(tmp_path / "run.log"):
        print("the recipe's own line")
        time.sleep(0.4)
    assert capfd.readouterr().out.splitlines() == [
        "[real] 10 min: training sft step 30/1250",
        "[real] 20 min: training sft step 60/1250",
    ]
    assert (tmp_path / "run.log").read_text() == "the recipe's own line\n"
