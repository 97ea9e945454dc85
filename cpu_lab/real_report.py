"""The real-model lab's report (``cpu_lab.real``): the answers first, from each SFT start, in this order: does GRPO
beat its start, does it beat more SFT for the same training compute (test and out of distribution), is it sharpening
or new coverage; then the controls, every run's table, the monitors' curves, the probes, times and commands."""

from __future__ import annotations

import json
import math
from pathlib import Path

from cpu_lab import matrix
from cpu_lab.demo import probe_lines
from cpu_lab.report import (
    CONTROL_BAND,
    MISSING,
    accuracy,
    command_line,
    gain_points,
    number,
    paired_gain,
    pyplot,
    recipe_command,
    reproduce,
    save_figure,
    table,
    write_markdown,
)
from eval.jsonl import read_jsonl
from eval.metrics import compare_pass_at_k, compare_records, pass_at_k_curve, plateau_stop

DEFAULT_ARM, RANDOM_ARM, FORMAT_ARM = "grpo_real_default", "grpo_real_random", "grpo_real_format_only"
DYNAMIC_ARM, FILTERED_ARM = "grpo_real_dynamic", "grpo_real_filtered"  # cpu_lab.real --sampling-arms
MORE_SFT = "sft_smollm2_more"
STARTS = {"early": "sft_smollm2", "plateau": "sft_smollm2_plateau"}  # start name -> its SFT config
SCREEN = "screen"  # <out>/screen/<start>/<setting>/grpo/<arm>/seed<k>: GRPO settings tried on dev (--screen)
TEST_EVAL = "eval_test"  # <model>/eval_test: every model's one reading of the test set (cpu_lab.real)
BASE = "base"  # <out>/base/eval_test: the pretrained model's, every SFT start's 'before'
TIMES = "lab_times.jsonl"  # <folder>/lab_times.jsonl: a line a stage the lab ran there (cpu_lab.real.clocked)
CURVES = [  # (log key, title) of the curves drawn per arm: the monitors' view of each run
    ("monitor/correct_rate", "correct answers (monitors' checker)"),
    ("rewards/gsm8k_format_reward/mean", "format reward (0.1 = formatted)"),
    ("monitor/degenerate_share", "degenerate groups on correctness"),
    ("monitor/length_correct", "length of correct answers (tokens)"),
    ("monitor/length_wrong", "length of wrong answers (tokens)"),
    ("monitor/reward_correctness_gap", "reward - correctness gap"),
]


def _samples(folder: Path) -> list[dict] | None:
    """A finished evaluation's samples; None while it runs (no ``results.json`` yet: its samples are a part)."""
    path = folder / "samples.jsonl"
    return read_jsonl(path) if path.exists() and (folder / "results.json").exists() else None


def _points(gain: dict) -> tuple[float, float, float]:
    return gain["difference"] * 100, gain["ci"][0] * 100, gain["ci"][1] * 100


def _seed(folder: Path) -> int:
    return int(folder.name.removeprefix("seed"))


def _runs(start_out: Path, arm: str) -> dict[int, Path]:
    """Finished runs of ``arm`` under one start's folder, by seed."""
    pattern = f"{arm}/seed*" if arm == MORE_SFT else f"grpo/{arm}/seed*"
    return {_seed(f): f for f in sorted(start_out.glob(pattern)) if (f / "report.json").exists()}


# GRPO options the lab sets itself (its data, start and evaluation): not a setting to screen or choose
LAB_INPUTS = {"data", "eval_data", "eval_limit", "model_name_or_path", "monitor_eval_data", "output_dir", "seed"}


def lab_options(run: Path) -> str:
    """The GRPO recipe options a lab run took beyond its config and the lab's data and start (``--steps``,
    ``--arm-options``), as ``key=value`` pairs; '' for none."""
    path = run / "matrix_run.json"
    flags = json.loads(path.read_text()).get("extra_args", []) if path.exists() else []
    pairs = [(flags[i], flags[i + 1]) for i in range(0, len(flags) - 1, 2) if flags[i].startswith("--")]
    return ",".join(f"{key[2:]}={value}" for key, value in pairs if key[2:] not in LAB_INPUTS)


def ood_by_shift(folder: Path, ood_rows: list[dict]) -> dict[str, list[dict]]:
    """A model's OOD samples (``<folder>/eval_ood``) grouped by shift (read from the data's ``shift`` column), with
    ``all`` for every shift together; {} when it has none."""
    samples = _samples(folder / "eval_ood")
    if not samples:
        return {}
    shift_of = {i: row.get("shift", "all") for i, row in enumerate(ood_rows)}
    groups: dict[str, list[dict]] = {"all": samples}
    for sample in samples:
        groups.setdefault(shift_of.get(sample["index"], "unknown"), []).append(sample)
    return groups


def ood_gains(a: Path, b: Path, ood_rows: list[dict]) -> dict[str, dict]:
    """OOD accuracy B - A per shift, paired over the same problems (``compare_records``, as ``eval compare``)."""
    groups_a, groups_b = ood_by_shift(a, ood_rows), ood_by_shift(b, ood_rows)
    return {s: compare_records(groups_a[s], groups_b[s]) for s in groups_a if s in groups_b}


def arm_gain(a: Path, b: Path) -> dict | None:
    """Test accuracy of model B minus model A over the same problems, from their ``eval_test`` folders (A: a run's
    start for its gain, or another arm)."""
    samples_a, samples_b = _samples(a / TEST_EVAL), _samples(b / TEST_EVAL)
    return compare_records(samples_a, samples_b) if samples_a and samples_b else None


def test_result(folder: Path) -> dict | None:
    """A model's test reading (``eval_test/results.json``), None before it finished."""
    path = folder / TEST_EVAL / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def start_of(folder: Path, out: Path) -> Path | None:
    """What a model of the lab trained from: an SFT start's is the pretrained model (``<out>/base``), an arm's is its
    SFT start (``<out>/sft/<config>/seed<k>``, the first); None for a start not found."""
    part = folder.relative_to(out).parts[0]
    if part == "sft":
        return out / BASE
    found = sorted((out / "sft" / STARTS[part]).glob("seed*")) if part in STARTS else []
    return found[0] if found else None


def _claim(gains: list[dict]) -> str:
    """Mean gain in points over seeds, and whether every seed's interval is above 0 (or below)."""
    points = [_points(g) for g in gains]
    mean = sum(p[0] for p in points) / len(points)
    if all(low > 0 for _, low, _ in points):
        sign = "every seed's interval above 0"
    elif all(high < 0 for _, _, high in points):
        sign = "every seed's interval below 0"
    else:
        sign = "not every seed's interval clear of 0"
    seeds = "; ".join(gain_points(g) for g in gains)
    return f"{mean:+.1f} points ({sign}: {seeds})"


def _ood_text(gains_by_seed: list[dict[str, dict]]) -> str:
    if not gains_by_seed or not all(gains_by_seed):
        return "not measured"
    parts = [f"all {_claim([g['all'] for g in gains_by_seed])}"]
    for shift in sorted(set(gains_by_seed[0]) - {"all"}):
        if all(shift in g for g in gains_by_seed):
            mean = sum(g[shift]["difference"] for g in gains_by_seed) / len(gains_by_seed) * 100
            parts.append(f"{shift.replace('_', ' ')} {mean:+.1f}")
    return "; ".join(parts)


def answers(out: Path, start: str, ood_rows: list[dict]) -> list[str]:
    """The report's lead for one start: the three questions, then the controls and forgetting."""
    start_out = out / start
    sft_dirs = sorted((out / "sft" / STARTS[start]).glob("seed*"))
    grpo, more = _runs(start_out, DEFAULT_ARM), _runs(start_out, MORE_SFT)
    head = f"### From the {start} SFT start"
    if not sft_dirs or not grpo:
        return [head, "", "Not measured yet: no GRPO run from this start has finished.", ""]
    sft = sft_dirs[0]
    options = sorted({lab_options(f) for f in grpo.values()})
    lines = [head, ""]
    if options != [""]:  # a setting chosen for this start (--arm-options, --steps), or seeds run at different ones
        said = " and ".join(f"`{o}`" if o else "none" for o in options)
        mixed = " (its seeds differ: not one setting)" if len(options) > 1 else ""
        lines += [f"The default arm's options beyond its config: {said}{mixed}.", ""]
    # 1. GRPO against its start
    test = [g for f in grpo.values() if (g := arm_gain(sft, f))]
    ood = [ood_gains(sft, f, ood_rows) for f in grpo.values()]
    lines.append(
        f"1. **Does GRPO beat its start?** Test (greedy, {len(test)} seed(s)): "
        f"{_claim(test) if test else 'not measured'}. Out of distribution: {_ood_text(ood)}."
    )
    # 2. GRPO against more SFT for the same optimizer-step seconds
    pairs = [(grpo[s], more[s]) for s in grpo if s in more]
    if pairs:
        test = [g for a, b in pairs if (g := arm_gain(b, a))]
        ood = [ood_gains(b, a, ood_rows) for a, b in pairs]
        seen = "; ".join(f"seed {_seed(a)}: {_compute(a, b)}" for a, b in pairs)
        lines.append(
            f"2. **Does it beat more SFT for the same compute?** GRPO minus more SFT, test: "
            f"{_claim(test) if test else 'not measured'}. Out of distribution: {_ood_text(ood)}. ({seen}.)"
        )
    else:
        lines.append("2. **Does it beat more SFT for the same compute?** Not measured yet: no more-SFT run finished.")
    # 3. Sharpening or new coverage: pass@1 and pass@K of the start and of GRPO on the same problems
    coverage = _coverage(sft, list(grpo.values()), "eval_pass", list(more.values()))
    if (ood_coverage := _coverage(sft, list(grpo.values()), "eval_ood_pass", list(more.values()))) != NO_PASSK:
        coverage = f"Test: {coverage} Out of distribution: {ood_coverage}"
    lines.append(f"3. **Sharpening or new coverage?** {coverage}")
    lines.append("")
    lines.append(_controls(start_out, sft, ood_rows))
    sampling = _sampling(start_out, sft, grpo)
    if sampling:
        lines += ["", sampling]
    others = [f for f in sorted(start_out.glob("grpo/*/seed*")) if _arm(f) != DEFAULT_ARM]  # controls, sampling
    forgetting = _forgetting([*grpo.values(), *others, *more.values()])
    if forgetting:
        lines += ["", forgetting]
    return [*lines, ""]


def _compute(grpo: Path, more: Path) -> str:
    """Seconds and examples each side trained on."""
    m = _report(more)
    g_cfg, g_steps = _config(grpo), _steps(grpo)
    prompts = (
        (g_steps or 0)
        * g_cfg.get("per_device_train_batch_size", 0)
        * g_cfg.get("gradient_accumulation_steps", 1)
        // max(g_cfg.get("num_generations", 1), 1)
    )
    g_seconds = train_seconds(grpo)
    return (
        f"GRPO {number(g_seconds, '.0f')} s, {g_steps} steps, {prompts} prompts x "
        f"{g_cfg.get('num_generations')} answers; more SFT {number(m.get('train_seconds'), '.0f')} s, "
        f"{m.get('steps')} steps, {(m.get('steps') or 0) * _config(more).get('per_device_train_batch_size', 0)} "
        "worked solutions"
    )


NO_PASSK = "Not measured (run the lab with --passk K)."


def _passk_folders(folder: Path, prefix: str) -> dict[int, Path]:
    """The finished folders of K samples a problem (``eval_pass<K>`` on test, ``eval_ood_pass<K>`` on OOD), by K."""
    found = {p: p.name.removeprefix(prefix) for p in folder.glob(f"{prefix}[0-9]*")}
    return {int(k): p for p, k in found.items() if k.isdigit() and _samples(p) is not None}


def _passk_folder(folder: Path, prefix: str) -> Path | None:
    """The finished folder of the most samples a problem, if any (a lab run again with a larger ``--passk``)."""
    found = _passk_folders(folder, prefix)
    return found[max(found)] if found else None


def sampled_accuracy(folder: Path, prefix: str) -> str:
    """Sampled pass@1 and pass@K of one model, e.g. ``pass@1 0.312, pass@64 0.781 (200 problems)``, or MISSING."""
    found = _passk_folder(folder, prefix)
    if found is None:
        return MISSING
    samples = _samples(found)
    curve = pass_at_k_curve(samples)
    return f"pass@1 {curve[0]:.3f}, pass@{len(curve)} {curve[-1]:.3f} ({len(samples)} problems)"


def _coverage(sft: Path, grpo: list[Path], prefix: str, more: list[Path] = ()) -> str:
    """GRPO's pass@1 and pass@K against its start (sharpening or new coverage), and more SFT's beside them where it
    sampled the same K."""
    start = _passk_folders(sft, prefix)
    shared = set(start).intersection(*(_passk_folders(f, prefix) for f in grpo))
    if not shared:  # the largest K that the start and every arm finished
        return NO_PASSK
    found = start[max(shared)]
    base = _samples(found)
    k = len(pass_at_k_curve(base))

    def against_start(folders: list[Path]) -> dict[Path, list[dict]]:  # paired pass@1 and pass@K gains, by model
        sampled = {folder: samples for folder in folders if (samples := _samples(folder / found.name)) is not None}
        return {folder: [compare_pass_at_k(base, samples, j) for j in (1, k)] for folder, samples in sampled.items()}

    def said(gains: dict[Path, list[dict]]) -> str:
        return "; ".join(
            f"seed {_seed(f)}: pass@1 {gain_points(a)}, pass@{k} {gain_points(b)}" for f, (a, b) in gains.items()
        )

    gains = against_start(grpo)
    one = [_points(g[0])[0] for g in gains.values()]
    top = [_points(g[1])[0] for g in gains.values()]
    mean_one, mean_top = sum(one) / len(one), sum(top) / len(top)
    unclear = sum(_points(g[1])[1] <= 0 for g in gains.values())  # seeds whose pass@K interval reaches 0
    if mean_one > 0 and mean_top <= 0:
        verdict = f"sharpening: pass@1 rose {mean_one:+.1f}, pass@{k} did not ({mean_top:+.1f})"
    elif mean_one > 0 and unclear:
        verdict = (
            f"pass@1 rose {mean_one:+.1f}; pass@{k} {mean_top:+.1f}, its interval reaching 0 on {unclear} of "
            f"{len(gains)} seed(s): sharpening, new coverage not shown"
        )
    elif mean_one > 0:
        verdict = f"both rose: pass@1 {mean_one:+.1f}, pass@{k} {mean_top:+.1f} (new coverage as well as sharpening)"
    else:
        verdict = f"pass@1 did not rise ({mean_one:+.1f}; pass@{k} {mean_top:+.1f})"
    beside = said(against_start(more))
    more_sft = f" More SFT for the same seconds, against the same start: {beside}." if beside else ""
    return f"{verdict}, in points against the start ({said(gains)}).{more_sft}"


def _controls(start_out: Path, sft: Path, ood_rows: list[dict]) -> str:
    parts, held_on = [], []
    for seed, folder in _runs(start_out, RANDOM_ARM).items():
        gain = arm_gain(sft, folder)
        if gain:
            d = _points(gain)[0]
            held = "within" if abs(d) <= CONTROL_BAND else "OUTSIDE"
            held_on.append(held == "within")
            ood = ood_gains(sft, folder, ood_rows).get("all")
            parts.append(
                f"the random-reward control moved test accuracy {d:+.1f} points ({held} ±{CONTROL_BAND:.0f}"
                + ("" if held == "within" else ": this rate moves the model by itself, so no verdict above holds")
                + f") on seed {seed}"
                + (f", OOD {gain_points(ood)}" if ood else "")
            )
    if len(held_on) > 1:
        parts.insert(
            0, f"the random-reward control held within ±{CONTROL_BAND:.0f} on {sum(held_on)} of {len(held_on)} seeds"
        )
    for folder in _runs(start_out, FORMAT_ARM).values():
        gain, rows = arm_gain(sft, folder), matrix.read_log(folder / "log.jsonl")
        start, end = matrix.window(rows, "reward", start=True), matrix.window(rows, "reward", start=False)
        rise = "" if start is None or end is None else f", its reward {start:.3f} → {end:.3f} (first → last quarter)"
        parts.append(f"the format-only reward moved it {gain_points(gain)} points{rise}")
    return "Controls: " + ("; ".join(parts) if parts else "not run yet") + "."


def _sampling(start_out: Path, sft: Path, default: dict[int, Path]) -> str:
    """Groups that teach nothing: the default arm's degenerate share, and the arms that avoid them (online dynamic
    sampling, the offline-filtered pool), each against the start and against the default arm of its seed."""
    arms = {DYNAMIC_ARM: _runs(start_out, DYNAMIC_ARM), FILTERED_ARM: _runs(start_out, FILTERED_ARM)}
    if not any(arms.values()):
        return ""
    parts = []
    for seed, folder in sorted(default.items()):
        rows = matrix.read_log(folder / "log.jsonl")
        share = matrix.window(rows, "monitor/degenerate_share", start=True)
        parts.append(f"the default arm (seed {seed}) trained on {number(share, '.0%')} degenerate groups at its start")
    for seed, folder in sorted(arms[DYNAMIC_ARM].items()):
        rows = matrix.read_log(folder / "log.jsonl")
        dropped = matrix.window(rows, "dynamic_sampling/dropped_share", start=True)
        key = "dynamic_sampling/extra_rounds"
        logged = [r[key] for r in rows if r.get(key) is not None]
        rounds = sum(logged) / len(logged) if logged else None
        parts.append(
            f"online dynamic sampling (seed {seed}) dropped {number(dropped, '.0%')} of the groups it generated at "
            f"its start, {number(rounds, '.2f')} extra rounds a step: {_against(sft, folder, default.get(seed))}"
        )
    for seed, folder in sorted(arms[FILTERED_ARM].items()):
        record = start_out / "filtered" / "filter.json"
        pool = json.loads(record.read_text()) if record.exists() else {}
        parts.append(
            f"the offline-filtered pool (seed {seed}; {pool.get('kept', '–')} of {pool.get('problems', '–')} "
            f"problems kept, expected degenerate share {number(pool.get('degenerate_share_before'), '.0%')} → "
            f"{number(pool.get('degenerate_share_after'), '.0%')}, {number(pool.get('sampling_seconds'), '.0f')} s "
            f"of sampling): {_against(sft, folder, default.get(seed))}"
        )
    return "Groups that teach nothing: " + "; ".join(parts) + "."


def _against(sft: Path, folder: Path, default: Path | None) -> str:
    """A sampling arm's test gain over its start and over the default arm of its seed, with both train seconds."""
    text = f"test {gain_points(arm_gain(sft, folder))} points against the start"
    if default is not None:
        text += (
            f", {gain_points(arm_gain(default, folder))} against the default arm "
            f"({number(train_seconds(folder), '.0f')} s of training against {number(train_seconds(default), '.0f')} s)"
        )
    return text


def _forgetting(folders: list[Path]) -> str:
    rows = []
    for folder in folders:
        path = folder / "forgetting" / "forgetting.json"
        if path.exists():
            f = json.loads(path.read_text())
            kl, delta = f["kl"], f["delta_log_likelihood"]
            rows.append(
                f"{_arm(folder)} seed {_seed(folder)} KL {kl['mean']:.4f}, Δ log-likelihood {delta['mean']:+.4f} "
                f"[{delta['ci'][0]:+.4f}, {delta['ci'][1]:+.4f}]"
            )
    if not rows:
        return ""
    return "Forgetting (per token, against the start, on text outside the task): " + "; ".join(rows) + "."


def _arm(folder: Path) -> str:
    return folder.parent.name


def _report(folder: Path) -> dict:
    path = folder / "report.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _config(folder: Path) -> dict:
    path = folder / "resolved_config.json"
    return json.loads(path.read_text()) if path.exists() else {}


def train_seconds(folder: Path) -> float:
    """The optimizer-step seconds a finished run took: its last logged ``train_seconds`` (evaluations and checks not
    counted), else the sum of TRL's per-step ``step_time`` (its generation, forward and backward passes)."""
    rows = _log(folder)
    logged = [r["train_seconds"] for r in rows if isinstance(r.get("train_seconds"), int | float)]
    if logged:
        return float(logged[-1])
    steps = [r["step_time"] for r in rows if isinstance(r.get("step_time"), int | float)]
    if not steps:
        raise SystemExit(f"{folder}/log.jsonl has neither train_seconds nor step_time: rerun that run")
    return float(sum(steps))


def _last(folder: Path, key: str) -> float | None:
    values = [r[key] for r in _log(folder) if isinstance(r.get(key), int | float)]
    return values[-1] if values else None


def _log(folder: Path) -> list[dict]:
    """Every row of a run's ``log.jsonl`` (an SFT run's too), [] without one."""
    path = folder / "log.jsonl"
    return (
        read_jsonl(path, "a run killed while it wrote its log leaves a torn last line: delete that line")
        if path.exists()
        else []
    )


def _ood_rows(out: Path) -> list[dict]:
    path = out / "data" / "ood.jsonl"
    return read_jsonl(path) if path.exists() else []


def _ood_accuracy(folder: Path, ood_rows: list[dict]) -> str:
    groups = ood_by_shift(folder, ood_rows)
    if not groups:
        return MISSING
    parts = [f"{sum(s['correct'] for s in rows) / len(rows):.3f}" for shift, rows in groups.items()]
    return " / ".join(parts)


def accuracy_table(folders: list[Path], ood_rows: list[dict], out: Path) -> str:
    """One row per run: test accuracy before (its start's) and after with intervals, the paired gain, OOD accuracy by
    shift, format rates, lengths, seconds."""
    shifts = ["all", *dict.fromkeys(r.get("shift", "all") for r in ood_rows if r.get("shift"))]
    header = [
        *("start", "run", "seed", "steps", "test before [95% CI]", "test after [95% CI]", "gain, points [95% CI]"),
        f"OOD after ({' / '.join(s.replace('_', ' ') for s in shifts)})",
        *("format before → after", "length correct / wrong after", "train seconds"),
    ]
    rows = []
    for folder in folders:
        report = _report(folder)
        origin = start_of(folder, out)
        before, after = test_result(origin) if origin else None, test_result(folder)
        fmt = MISSING if not (before and after) else f"{before['format_rate']:.2f} → {after['format_rate']:.2f}"
        lengths = MISSING
        if after:
            lengths = " / ".join(
                number((after["length_tokens"].get(k) or {}).get("mean"), ".1f") for k in ("correct", "wrong")
            )
        start = next((s for s in STARTS if s in folder.parts), "sft")
        rows.append(
            [
                *(start, _arm(folder), folder.name.removeprefix("seed"), number(_steps(folder), "d")),
                *(accuracy(before), accuracy(after), gain_points(arm_gain(origin, folder) if origin else None)),
                _ood_accuracy(folder, ood_rows),
                *(fmt, lengths, number(report.get("train_seconds") or _last(folder, "train_seconds"), ".0f")),
            ]
        )
    return table(header, rows)


def _steps(folder: Path) -> int | None:
    """A run's optimizer steps: its report's (SFT), else the last logged step (GRPO), None without either."""
    rows = matrix.read_log(folder / "log.jsonl")
    return _report(folder).get("steps") or (max(r.get("step", 0) for r in rows) if rows else None)


def _reward_funcs(folder: Path) -> list[str]:
    return _config(folder).get("reward_funcs", [])


def run_summary(folder: Path) -> str:
    """A GRPO run's monitors over its first and its last quarter of logged steps, and its test accuracy."""
    rows = matrix.read_log(folder / "log.jsonl")
    if not rows:
        raise SystemExit(f"{folder} has no log.jsonl with training rows: pass a GRPO run's output_dir")
    keys = [*(k for k, _ in CURVES), "monitor/degenerate_all_wrong_share", "monitor/truncated_rate", "reward"]
    windows = [(key, matrix.window(rows, key, start=True), matrix.window(rows, key, start=False)) for key in keys]
    lines = [f"{folder}: {max(r.get('step', 0) for r in rows)} steps"]
    lines.append(
        table(
            ["metric", "first quarter", "last quarter"],
            ([key, f"{start:.3f}", f"{end:.3f}"] for key, start, end in windows if start is not None),
        )
    )
    report = _report(folder)
    if test_result(folder) and not report.get("after"):  # a lab run: its test reading is the lab's, not the recipe's
        lines.append(f"test accuracy (the lab's reading) {accuracy(test_result(folder))}")
        return "\n".join(lines)
    lines.append(f"held-out accuracy {accuracy(report.get('before'))} -> {accuracy(report.get('after'))}")
    if report.get("before") and report.get("after"):
        lines.append(
            f"held-out format rate {report['before']['format_rate']:.3f} -> {report['after']['format_rate']:.3f}"
        )
    return "\n".join(lines)


def patience_line(checks: list[dict], patiences=(2, 4, 6, 8, 12, 16)) -> str:
    """Where the plateau rule (``eval.metrics.plateau_stop``) stops on a start's dev curve at each patience, and the
    best check it keeps: the curve that chooses the patience (a rule that goes on past the last check needs a longer
    run).

    >>> curve = [{"step": s, "accuracy": a} for s, a in [(25, 0.4), (50, 0.6), (75, 0.5), (100, 0.55)]]
    >>> patience_line(curve, (2, 4))
    '  - the plateau rule on its dev curve, by patience: 2 checks, stops at step 100 keeping 0.600 (step 50); 4 checks, goes on past step 100'
    """  # noqa: E501
    said = []
    for n in patiences:
        stop, best = plateau_stop(checks, n)
        kept = f"stops at step {stop['step']} keeping {best['accuracy']:.3f} (step {best['step']})" if stop else None
        said.append(f"{n} checks, {kept or 'goes on past step ' + str(checks[-1]['step'])}")
    return "  - the plateau rule on its dev curve, by patience: " + "; ".join(said)


def plot_curves(folders: list[Path], path: Path) -> Path:
    """The monitors' per-step curves of every GRPO run (a 5-step running mean; thin: each step)."""
    fig, axes = pyplot().subplots(2, 3, figsize=(13, 6.5))
    for folder in folders:
        rows = matrix.read_log(folder / "log.jsonl")
        start = next((s for s in STARTS if s in folder.parts), "")
        label = f"{start} {_arm(folder)} {folder.name}"
        for ax, (key, title) in zip(axes.flat, CURVES, strict=True):
            points = [
                (r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float) and not math.isnan(r[key])
            ]
            if not points:
                continue
            steps, values = zip(*points, strict=True)
            smooth = [
                sum(values[max(0, i - 4) : i + 1]) / len(values[max(0, i - 4) : i + 1]) for i in range(len(values))
            ]
            (line,) = ax.plot(steps, smooth, label=label)
            ax.plot(steps, values, color=line.get_color(), alpha=0.25, linewidth=0.8)
            ax.set(title=title, xlabel="GRPO step")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, path)


def write_report(out: Path, seconds: dict) -> Path:
    """``report.md``: the answers from each start, the SFT starts, every run's table, curves, probes, commands."""
    started_sft = sorted((out / "sft").glob("*/seed*"))
    sft_dirs = [f for f in started_sft if (f / "report.json").exists()]  # finished starts
    grpo = sorted(out.glob("*/grpo/*/seed*"), key=lambda f: (f.parts[-4], _arm(f) != DEFAULT_ARM, _arm(f), f.name))
    others = sorted([*out.glob(f"*/{MORE_SFT}/seed*"), *out.glob("*/dpo/*/seed*")])
    if not sft_dirs and not grpo:
        raise SystemExit(f"no finished stages under {out}: run `python -m cpu_lab.real --out {out}` first")
    ood_rows = _ood_rows(out)
    lines = ["# Real-model lab: what GRPO adds after SFT (SmolLM2-135M-Instruct, 2 CPU cores)", ""]
    for start in STARTS:
        if (out / start).exists():
            lines += answers(out, start, ood_rows)
    lines.append("## The SFT starts")
    lines.append("")
    for sft_dir in sft_dirs:
        sft = _report(sft_dir)
        v = sft.get("validation") or {}
        lines += [
            f"- **{sft_dir.parent.name}** ({sft.get('rows')} worked solutions): stopped at step {sft.get('steps')} "
            f"({v.get('why', 'no dev check')}; dev accuracy {v.get('last')}"
            + (f", best {v['best']} at step {v['best_step']}, kept" if "best" in v else "")
            + f"); test {accuracy(test_result(out / BASE))} before → {accuracy(test_result(sft_dir))} after; OOD after "
            f"{_ood_accuracy(sft_dir, ood_rows)} (all / by shift). Sampled: test "
            f"{sampled_accuracy(sft_dir, 'eval_pass')}; OOD {sampled_accuracy(sft_dir, 'eval_ood_pass')}.",
        ]
        lines += [patience_line(v["checks"])] if "best" in v and v.get("checks") else []
    for sft_dir in sorted(set(started_sft) - set(sft_dirs)):
        lines.append(f"- **{sft_dir.parent.name}**: not finished (no report.json yet).")
    finished = [f for f in grpo + others if (f / "report.json").exists()]
    lines += ["", "## Every run", "", accuracy_table(sft_dirs + finished, ood_rows, out), ""]
    unfinished = sorted(set(grpo + others) - set(finished))  # running or killed: their numbers are not final
    for folder in unfinished:
        logged = _last(folder, "step")
        steps = f", {logged} steps logged" if logged else ""
        lines.append(f"- not finished (no report.json yet, so not in the table): {folder.relative_to(out)}{steps}")
    lines += [""] if unfinished else []
    for dpo_dir in sorted(out.glob("*/dpo/*/seed*")):
        dpo = _report(dpo_dir)
        lines += [
            f"DPO: {dpo.get('pairs', '–')} pairs; first loss {dpo.get('first_loss')} (expected "
            f"{dpo.get('first_loss_expected')}: {'ok' if dpo.get('first_loss_ok') else 'NOT ok'}).",
            "",
        ]
    lines += [
        "Greedy decoding on the test problems (never trained on, never read by a choice; every model read once, "
        "with the GRPO arms' answer length) and on the OOD problems (read by no run and no choice). Intervals: "
        "Wilson 95% for an accuracy, paired bootstrap 95% over the same problems for a gain (as `eval compare`). A "
        "run's 'before' is its start's reading: an arm's is its SFT start's, a start's the pretrained model's. Train "
        "seconds: optimizer steps only (evaluations and checks not counted).",
        "",
        "## What the monitors saw during GRPO",
        "",
    ]
    for start in STARTS:
        if (out / start / "grpo").exists():
            lines += [f"From the {start} start:", "", matrix.comparison_table(matrix.collect(out / start / "grpo")), ""]
    if grpo:
        lines.append(f"![curves]({plot_curves(grpo, out / 'curves.png').name})")
        lines += ["", "## Hack probes (scored under each run's own rewards at the start)", ""]
        for folder in grpo:
            lines.append(f"- {folder.parts[-4]} {_arm(folder)} {folder.name}:")
            if "lab_random" in _reward_funcs(folder):
                lines.append("  - (a coin-flip reward: its probe scores are draws, not a verdict on the probes)")
                continue
            lines += probe_lines(folder / "probes.json")
    lines += ["", "## Time", "", *time_lines(out)]
    lines += [f"- this command, {name}: {s:.0f} s" for name, s in seconds.items()]
    commands = [f"OMP_NUM_THREADS=2 python -m cpu_lab.real --out {out}", "# stage by stage:"]
    for folder in [*sft_dirs, *grpo, *others]:
        settings_path = folder / matrix.SETTINGS_FILE
        if settings_path.exists():
            s = json.loads(settings_path.read_text())
            commands.append(recipe_command(s["config"], s["seed"], folder, s["extra_args"]))
        commands += [p.read_text().strip() for p in sorted(folder.glob("*.command.txt"))]
    commands += [p.read_text().strip() for p in sorted(out.glob("*/rollouts/command.txt"))]
    commands += [p.read_text().strip() for p in sorted(out.glob("*/filtered/sample.command.txt"))]
    lines += ["", *reproduce(commands), "", f"Command line of this report: `{command_line()}`."]
    return write_markdown(out / "report.md", lines)


def time_lines(out: Path) -> list[str]:
    """The stages' times as the lab recorded them (``TIMES`` in each folder), a row per stage and start: every lab
    command's, so a lab run over several sittings is timed whole; what ran beside what shows in the load."""
    rows: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(out.rglob(TIMES)):
        where, *rest = path.parent.relative_to(out).parts  # a start's arms (early, plateau), the starts (sft), base
        if where == "sft":  # sft/<the start's config>/seed<k>: the start itself
            where = next((f"{name} start" for name, config in STARTS.items() if rest[:1] == [config]), where)
        for line in read_jsonl(path):
            rows.setdefault((line["what"], where), []).append(line)
    if not rows:
        return ["- no stage timed yet (the lab records each stage's time in `lab_times.jsonl` beside it)"]
    cells = []
    for (what, where), lines in rows.items():
        whole = [line["seconds"] / 60 for line in lines if not line["resumed"]]
        spread = f"{min(whole):.0f}-{max(whole):.0f}" if len(whole) > 1 else MISSING
        resumed = sum(line["resumed"] for line in lines)
        loads = [load for line in lines for load in line["load"]]
        first, last = min(line["date"] for line in lines)[:10], max(line["date"] for line in lines)[:10]
        cells.append(
            [
                what,
                where,
                f"{len(lines)}" + (f" ({resumed} resumed, not in the mean)" if resumed else ""),
                number(sum(whole) / len(whole) if whole else None, ".0f"),
                spread,
                ", ".join(sorted({str(line["threads"]) for line in lines})),
                f"{min(loads):.1f}-{max(loads):.1f}",
                "; ".join(sorted({line["cpu"] for line in lines})),
                first if first == last else f"{first} to {last}",
            ]
        )
    header = ["stage", "in", "times run", "minutes (mean)", "range", "threads", "load", "CPU", "dates"]
    total = sum(line["seconds"] for lines in rows.values() for line in lines) / 3600
    return [
        table(header, cells),
        "",
        f"Stage time recorded, in all: {total:.1f} h (stages that ran side by side overlap in wall time; a stage "
        "resumed after a kill counts from its checkpoint). Each run's own clock is its report.json `seconds`.",
        "",
    ]


def screen_folder(setting: str) -> str:
    """The folder name of a ``--screen`` setting: the setting as given, or ``as_configured`` for none."""
    return setting or "as_configured"


def write_screen_report(screen: Path) -> Path:
    """``screen.md``: each GRPO setting tried on dev from each start, the default arm and the random-reward control (on
    each of its seeds), dev accuracy before and after with paired 95% intervals. A setting can be chosen when its
    default arm's interval is above 0 and its control moved no more than the lab's band on every seed; the choice is
    the reader's, made on dev alone."""
    rows = []
    settings = [f for start in sorted(d for d in screen.iterdir() if d.is_dir()) for f in sorted(start.iterdir())]
    for folder in (f for f in settings if f.is_dir()):
        default = next(iter(_runs(folder, DEFAULT_ARM).values()), None)
        lift = paired_gain(default) if default else None
        drifts = {seed: paired_gain(f) for seed, f in _runs(folder, RANDOM_ARM).items()}
        drifts = {seed: gain for seed, gain in drifts.items() if gain}
        if lift is None or not drifts:
            verdict = "not finished"
        else:
            held = sum(abs(gain["difference"] * 100) <= CONTROL_BAND for gain in drifts.values())
            lifts = lift["ci"][0] > 0
            verdict = (
                f"control within ±{CONTROL_BAND:.0f} on {held} of {len(drifts)} seed(s)"
                + ("; the default arm lifts" if lifts else "; the default arm's interval reaches 0")
                + (": a candidate" if lifts and held == len(drifts) else "")
            )
        before = _report(default).get("before") if default else None
        control = "; ".join(f"{gain_points(gain)} (seed {seed})" for seed, gain in drifts.items()) or MISSING
        rows.append([folder.parent.name, f"`{folder.name}`", accuracy(before), gain_points(lift), control, verdict])
    if not rows:
        raise SystemExit(f"no settings screened under {screen}: run `python -m cpu_lab.real --screen beta=0.3` first")
    lines = [
        "# Real-model lab: GRPO settings screened on dev",
        "",
        "From an SFT start, the default arm and the random-reward control with each setting's recipe options, "
        "evaluated before and after on the dev problems (never on test). Gains in points, paired bootstrap 95% "
        f"intervals over the same problems; the control may move by at most ±{CONTROL_BAND:.0f} points.",
        "",
        table(["start", "setting", "dev before", "default arm", "random control", "verdict"], rows),
        "",
        f"Command line of this report: `{command_line()}`.",
    ]
    return write_markdown(screen / "screen.md", lines)
