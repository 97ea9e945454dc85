"""leash's eval against lm-evaluation-harness: the same model, problems, prompt and generation settings, per sample.

    pip install -r requirements-bench.txt      # lm-eval (not in requirements.txt: CI does not install it)
    make real-model                            # SmolLM2-135M-Instruct at runs/real_model/model
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.eval_vs_lm_eval --limit 100 --max-new-tokens 128

Both run as a user runs them, one after the other, each a fresh process (imports and model load inside its time):

1. ``python -m eval run --model M --task gsm8k --data D --limit N --max-new-tokens T --batch-size B --dtype float32``;
2. ``python -m lm_eval run --model hf --model_args pretrained=M,dtype=float32 --tasks leash_gsm8k --include_path
   TASK_DIR --apply_chat_template --batch_size B --limit N --log_samples``, where ``leash_gsm8k`` is written here at
   run time: lm-eval's own ``gsm8k`` (its metric, ``strict-match`` and ``flexible-extract``) on the offline file D,
   zero-shot, with leash's prompt, greedy, stopping at end-of-sequence only (as leash does).

Per problem: are the prompts and completions identical; do leash's strict and lenient verdicts agree with
``strict-match`` and ``flexible-extract``, on each run's own completions and on lm-eval's; do both read the same
answer; and, since a small model is rarely right, do the verdicts agree with the gold set to the number lm-eval read.
Every difference is printed with its cause. Wall and CPU times and their ratios (leash / lm-eval; below 1 means
leash is faster) come from this one invocation, with the load average around each run. ``--repeats R`` runs each
harness R times in ABBA order so that drifting load weighs on both. ``--out DIR/report.json`` holds it all.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import yaml

from eval.report import table
from eval.run import load_problems
from eval.samples import score_sample
from eval.scoring import LM_EVAL_FLEXIBLE_RE
from eval.tasks import get_task
from rewards.answers import normalize_number

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "runs" / "real_model" / "model"
DEFAULT_DATA = ROOT / "tests" / "data" / "gsm8k" / "test.jsonl"
INSTALL = "pip install -r requirements-bench.txt"
TASK_NAME = "leash_gsm8k"
FILTERS = {"strict": "strict-match", "lenient": "flexible-extract"}  # leash's rule -> lm-eval's filter
INVALID = "[invalid]"  # lm-eval's RegexFilter fallback: nothing matched
PROMPT_MODULE = '''"""doc_to_text of the local task: leash's own GSM8K prompt (eval.tasks), read at run time."""

from eval.tasks import get_task


def doc_to_text(doc):
    [message] = get_task("gsm8k").prompt(doc["question"])
    return message["content"]
'''


def lm_eval_problem() -> str | None:
    """Why lm-eval cannot run here, or None."""
    if importlib.util.find_spec("lm_eval") is None:
        return f"lm-eval is not installed: {INSTALL}"
    return None


def lm_eval_gsm8k() -> dict:
    """The installed lm-eval's own gsm8k task config (its YAML has no custom tags)."""
    spec = importlib.util.find_spec("lm_eval")
    path = Path(next(iter(spec.submodule_search_locations))) / "tasks" / "gsm8k" / "gsm8k.yaml"
    return yaml.safe_load(path.read_text())


def lm_eval_regexes(config: dict) -> dict:
    """``{filter name: [regex, group_select]}`` of lm-eval's gsm8k filters."""
    regexes = {}
    for entry in config["filter_list"]:
        [regex] = [f for f in entry["filter"] if f["function"] == "regex"]
        regexes[entry["name"]] = [regex["regex_pattern"], regex.get("group_select", 0)]
    return regexes


def check_flexible_regex(config: dict) -> None:
    """Raise unless lm-eval's flexible-extract is the rule leash's lenient GSM8K score mimics."""
    pattern, group = lm_eval_regexes(config)[FILTERS["lenient"]]
    if (pattern, group) != (LM_EVAL_FLEXIBLE_RE.pattern, -1):
        raise RuntimeError(
            f"the installed lm-eval's flexible-extract is {pattern!r} (group_select {group}), not the rule of "
            f"eval.scoring.LM_EVAL_FLEXIBLE_RE ({LM_EVAL_FLEXIBLE_RE.pattern!r}, last match): install the pinned "
            f"version ({INSTALL}) or update eval/scoring.py"
        )


def write_task(folder: Path, data: Path, max_new_tokens: int, config: dict) -> Path:
    """The local lm-eval task (YAML + its prompt module) in ``folder``. JSON values are valid YAML."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{TASK_NAME}_prompt.py").write_text(PROMPT_MODULE)
    generation = {"until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": max_new_tokens}
    lines = [
        f"task: {TASK_NAME}",
        "dataset_path: json",
        f"dataset_kwargs: {json.dumps({'data_files': {'test': str(Path(data).resolve())}})}",
        "output_type: generate_until",
        "test_split: test",
        f"doc_to_text: !function {TASK_NAME}_prompt.doc_to_text",
        f"doc_to_target: {json.dumps(config['doc_to_target'])}",
        f"metric_list: {json.dumps(config['metric_list'])}",
        f"filter_list: {json.dumps(config['filter_list'])}",
        f"generation_kwargs: {json.dumps(generation)}",
        "num_fewshot: 0",
        "repeats: 1",
    ]
    path = folder / f"{TASK_NAME}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def commands(args, out: Path, repeat: int = 0) -> dict[str, list[str]]:
    """The two command lines of one repeat; their files go to ``out/leash_<repeat>`` and ``out/lm_eval_<repeat>``."""
    common = {"limit": str(args.limit), "batch": str(args.batch_size)}
    leash = [sys.executable, "-m", "eval", "run", "--model", str(args.model), "--task", "gsm8k"]
    leash += ["--data", str(args.data), "--limit", common["limit"], "--max-new-tokens", str(args.max_new_tokens)]
    leash += ["--batch-size", common["batch"], "--dtype", "float32", "--out", str(out / f"leash_{repeat}")]
    lm_eval = [sys.executable, "-m", "lm_eval", "run", "--model", "hf"]
    lm_eval += ["--model_args", f"pretrained={args.model},dtype=float32", "--tasks", TASK_NAME]
    lm_eval += ["--include_path", str(out / "task"), "--apply_chat_template", "--batch_size", common["batch"]]
    lm_eval += ["--limit", common["limit"], "--log_samples", "--output_path", str(out / f"lm_eval_{repeat}")]
    return {"leash": leash, "lm_eval": lm_eval}


def run_order(repeats: int, lm_eval_first: bool = False) -> list[tuple[str, int]]:
    """(harness, repeat) in the order they run: ABBA..., so that a load that drifts during the bench weighs on both.

    >>> run_order(2)
    [('leash', 0), ('lm_eval', 0), ('lm_eval', 1), ('leash', 1)]
    """
    first, second = ("lm_eval", "leash") if lm_eval_first else ("leash", "lm_eval")
    order = []
    for r in range(repeats):
        order += [(first, r), (second, r)] if r % 2 == 0 else [(second, r), (first, r)]
    return order


def run_timed(command: list[str], env: dict, log: Path) -> dict:
    """Run one command: its wall time, its CPU time with its children's (steadier on a shared machine), the load."""
    load_before = os.getloadavg()[0]
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(command, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(command[:4])} ... failed with exit code {proc.returncode} (log {log}):\n{tail}")
    return {"seconds": seconds, "cpu_seconds": cpu, "load_before": load_before, "load_after": os.getloadavg()[0]}


def read_lm_eval_samples(folder: Path) -> dict[int, dict]:
    """lm-eval's ``--log_samples`` under ``folder``: per doc, prompt, completion, each filter's answer and verdict."""
    files = sorted(Path(folder).rglob(f"samples_{TASK_NAME}_*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no samples_{TASK_NAME}_*.jsonl under {folder}: run lm-eval with --log_samples")
    docs: dict[int, dict] = {}
    for line in files[-1].read_text().splitlines():
        row = json.loads(line)
        doc = docs.setdefault(row["doc_id"], {"filters": {}})
        [[completion]] = row["resps"]
        [request] = row["arguments"].values() if isinstance(row["arguments"], dict) else row["arguments"]
        doc["prompt"] = request["arg_0"] if isinstance(request, dict) else request[0]
        doc["completion"] = completion
        [filtered] = row["filtered_resps"]
        filtered = filtered[0] if isinstance(filtered, list) else filtered
        doc["filters"][row["filter"]] = {
            "extracted": None if filtered == INVALID else filtered,
            "correct": bool(row["exact_match"]),
        }
    return docs


def lm_eval_string(text: str | None, config: dict) -> str | None:
    """What lm-eval's exact_match compares: the text with its ``regexes_to_ignore`` removed, lower-cased."""
    if text is None:
        return None
    [metric] = [m for m in config["metric_list"] if m["metric"] == "exact_match"]
    for pattern in metric.get("regexes_to_ignore", []):
        text = re.sub(pattern, "", text)
    return text.lower() if metric.get("ignore_case") else text


def _number(text: str | None) -> str | None:
    return None if text is None else normalize_number(text)


def _cause(rule: str, read: str | None, theirs: dict, same_text: bool, reason: str, gold: str, config: dict) -> str:
    """Why leash and lm-eval differ on one problem under ``rule`` (``read``: the answer leash's rule read)."""
    if not same_text:
        return "generation: the two completions differ"
    if _number(read) is not None and _number(read) == _number(theirs["extracted"]):
        return (
            f"equality: both read {theirs['extracted']!r}; leash compares numbers ({_number(read)} vs {gold}), "
            f"lm-eval strings ({lm_eval_string(theirs['extracted'], config)!r} vs {lm_eval_string(gold, config)!r})"
        )
    if rule == "strict":
        return (
            f"extraction: leash reads the last '####' and refuses a hedge, disagreeing markers or arithmetic "
            f"(reason {reason}), lm-eval the first '#### ' number"
        )
    return "extraction: the two read different numbers from the same text"


def compare_runs(
    leash: list[dict],
    lm_eval: dict[int, dict],
    config: dict,
    prompts: list[str] | None = None,
    exact_match=None,
) -> dict:
    """Per-problem agreement of leash's samples (K = 1) with lm-eval's, per rule, as the module docstring lists it;
    every difference with both readings and its cause.
    """
    shared = [r for r in leash if r["index"] in lm_eval]
    report = {"n": len(shared), "identical_completions": 0, "disagreements": []}
    if prompts is not None:
        report["identical_prompts"] = sum(prompts[r["index"]] == lm_eval[r["index"]]["prompt"] for r in shared)
    names = ("agree", "same_text_agree", "read_agree", "planted_agree", "planted_n", "leash", "lm_eval")
    counts = {rule: dict.fromkeys(names, 0) for rule in FILTERS}
    for r in shared:
        doc = lm_eval[r["index"]]
        same_text = r["completion"] == doc["completion"]
        report["identical_completions"] += same_text
        on_their_text = score_sample(doc["completion"], r["gold"], "gsm8k")
        for rule, filter_name in FILTERS.items():
            key, read_key = ("correct", "extracted") if rule == "strict" else ("lenient_correct", "lenient_extracted")
            theirs, c = doc["filters"][filter_name], counts[rule]
            ours, read = bool(r[key]), r[read_key]
            c["leash"] += ours
            c["lm_eval"] += theirs["correct"]
            c["agree"] += ours == bool(theirs["correct"])
            c["same_text_agree"] += bool(on_their_text[key]) == theirs["correct"]
            same_read = _number(read) == _number(theirs["extracted"])
            c["read_agree"] += same_read
            planted = None
            if exact_match is not None and _number(theirs["extracted"]) is not None:
                gold = _number(theirs["extracted"])
                leash_planted = bool(score_sample(r["completion"], gold, "gsm8k")[key])
                planted = (leash_planted, exact_match(theirs["extracted"], gold))
                c["planted_n"] += 1
                c["planted_agree"] += planted[0] == planted[1]
            if ours == theirs["correct"] and same_read and (planted is None or planted[0] == planted[1]):
                continue
            cause_gold = r["gold"] if ours != theirs["correct"] else _number(theirs["extracted"]) or r["gold"]
            report["disagreements"].append(
                {
                    "index": r["index"],
                    "rule": rule,
                    "lm_eval_filter": filter_name,
                    "gold": r["gold"],
                    "differs_in": [
                        name
                        for name, differs in (
                            ("verdict", ours != theirs["correct"]),
                            ("answer read", not same_read),
                            ("planted-gold verdict", planted is not None and planted[0] != planted[1]),
                        )
                        if differs
                    ],
                    "leash_extracted": read,
                    "leash_correct": ours,
                    "lm_eval_extracted": theirs["extracted"],
                    "lm_eval_correct": theirs["correct"],
                    "cause": _cause(rule, read, theirs, same_text, r.get("reason"), cause_gold, config),
                    "leash_tail": r["completion"][-160:],
                    "lm_eval_tail": None if same_text else doc["completion"][-160:],
                }
            )
    n = max(1, report["n"])
    for rule, c in counts.items():
        report[rule] = {
            **c,
            "share": c["agree"] / n,
            "same_text_share": c["same_text_agree"] / n,
            "read_share": c["read_agree"] / n,
            "planted_share": c["planted_agree"] / c["planted_n"] if c["planted_n"] else None,
            "leash_accuracy": c["leash"] / n,
            "lm_eval_accuracy": c["lm_eval"] / n,
        }
    return report


def lm_eval_exact_match(config: dict):
    """lm-eval's own exact_match with the task's settings, as ``f(prediction, reference) -> bool``."""
    from lm_eval.api.metrics import exact_match_hf_evaluate  # optional: requirements-bench.txt

    [metric] = [m for m in config["metric_list"] if m["metric"] == "exact_match"]
    kwargs = {k: metric[k] for k in ("regexes_to_ignore", "ignore_case", "ignore_punctuation") if k in metric}

    def exact_match(prediction: str, reference: str) -> bool:
        return bool(exact_match_hf_evaluate([prediction], [reference], **kwargs)["exact_match"] == 1)  # not numpy

    return exact_match


def leash_prompts(model: Path, data: Path, limit: int) -> list[str]:
    """The prompt texts leash generates from (eval.generate.encode_prompts' template, as text)."""
    from transformers import AutoTokenizer  # ~2.5 s that --help and a refused run do not pay

    tokenizer = AutoTokenizer.from_pretrained(model)
    problems = load_problems(get_task("gsm8k"), str(data), limit)
    return [tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=False) for p in problems]


def markdown(report: dict) -> str:
    n = report["n"]
    lines = [
        f"## leash vs lm-evaluation-harness {report['lm_eval_version']}: {report['model_name']}, GSM8K first {n}, "
        f"{report['max_new_tokens']} new tokens, greedy, batch {report['batch_size']}, {report['threads']} thread(s)",
        "",
        f"identical prompts (chat template applied): {report.get('identical_prompts', 'n/a')}/{n}; identical "
        f"completions: {report['identical_completions']}/{n}",
        "",
    ]

    def share(k, total):
        return f"{k}/{total} ({100 * k / total:.1f}%)" if total else "n/a"

    rows = []
    for rule, filter_name in FILTERS.items():
        r = report[rule]
        rows.append(
            [rule, filter_name, f"{r['leash']}/{n}", f"{r['lm_eval']}/{n}", share(r["agree"], n)]
            + [share(r["same_text_agree"], n), share(r["read_agree"], n), share(r["planted_agree"], r["planted_n"])]
        )
    header = ["leash rule", "lm-eval filter", "leash right", "lm-eval right", "same verdict"]
    header += ["same verdict, lm-eval's text", "same answer read", "same verdict, gold := lm-eval's answer"]
    lines.append(table(header, rows))
    goal = all(report[rule]["share"] >= 0.99 for rule in FILTERS)
    lines += ["", f"goal (>= 99% same verdict on each rule): {'met' if goal else 'NOT met'}", ""]
    for d in report["disagreements"]:
        lines.append(
            f"- problem {d['index']}, {d['rule']} vs {d['lm_eval_filter']} (gold {d['gold']}; differs in "
            f"{', '.join(d['differs_in'])}): leash read {d['leash_extracted']!r} -> "
            f"{'right' if d['leash_correct'] else 'wrong'}; lm-eval read {d['lm_eval_extracted']!r} -> "
            f"{'right' if d['lm_eval_correct'] else 'wrong'}. {d['cause']}. leash's completion ends "
            f"{d['leash_tail']!r}" + ("" if d["lm_eval_tail"] is None else f"; lm-eval's ends {d['lm_eval_tail']!r}")
        )
    if not report["disagreements"]:
        lines.append("no difference in any verdict or answer read")
    if "runs" in report:
        header = ["run", "wall s (fresh process: imports, model load, generation, scoring)", "CPU s"]
        runs = [
            [f"{run['harness']} #{run['repeat']}", f"{run['seconds']:.1f}", f"{run['cpu_seconds']:.1f}"]
            + [f"{run['load_before']:.2f} / {run['load_after']:.2f}"]
            for run in report["runs"]
        ]
        lines += ["", table([*header, "load before / after"], runs)]
        t, cpu = report["wall_s"], report["cpu_s"]
        lines += [
            "",
            f"total wall time: leash {t['leash']:.1f} s, lm-eval {t['lm_eval']:.1f} s; leash / lm-eval "
            f"{report['wall_ratio']:.2f} ({'no slower' if report['wall_ratio'] <= 1 else 'SLOWER'})",
            f"total CPU time: leash {cpu['leash']:.1f} s, lm-eval {cpu['lm_eval']:.1f} s; leash / lm-eval "
            f"{report['cpu_ratio']:.2f} ({'no slower' if report['cpu_ratio'] <= 1 else 'SLOWER'})",
        ]
        if "repeats_identical" in report:
            lines.append(f"every repeat's completions identical to the first's: {report['repeats_identical']}")
    return "\n".join(lines) + "\n"


def _completions(out: Path, harness: str, repeat: int) -> list[str]:
    if harness == "leash":
        rows = [json.loads(line) for line in (out / f"leash_{repeat}" / "samples.jsonl").read_text().splitlines()]
        return [row["completion"] for row in rows]
    docs = read_lm_eval_samples(out / f"lm_eval_{repeat}")
    return [docs[i]["completion"] for i in sorted(docs)]


def run_bench(args) -> dict:
    problem = lm_eval_problem()
    if problem:
        raise RuntimeError(problem)
    if min(args.limit, args.max_new_tokens, args.batch_size, args.threads, args.repeats) < 1:
        raise ValueError("--limit, --max-new-tokens, --batch-size, --threads and --repeats must be positive")
    for path, what in ((args.model, "--model"), (args.data, "--data")):
        if not Path(path).exists():
            fix = "run `make real-model`" if what == "--model" else "pass --data with a GSM8K .jsonl"
            raise FileNotFoundError(f"{what} {path} does not exist: {fix}")
    config = lm_eval_gsm8k()
    check_flexible_regex(config)
    out = Path(args.out or tempfile.mkdtemp(prefix="eval_vs_lm_eval_"))
    if (out / "leash_0").exists() or (out / "lm_eval_0").exists():
        raise ValueError(f"{out} holds an earlier comparison: pass another --out, or delete it")
    write_task(out / "task", args.data, args.max_new_tokens, config)
    env = os.environ | {
        "OMP_NUM_THREADS": str(args.threads),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    runs = []
    for harness, repeat in run_order(args.repeats, args.lm_eval_first):
        command = commands(args, out, repeat)[harness]
        runs.append({"harness": harness, "repeat": repeat, **run_timed(command, env, out / f"{harness}_{repeat}.log")})
    leash = [json.loads(line) for line in (out / "leash_0" / "samples.jsonl").read_text().splitlines()]
    report = compare_runs(
        leash,
        read_lm_eval_samples(out / "lm_eval_0"),
        config,
        prompts=leash_prompts(args.model, args.data, args.limit),
        exact_match=lm_eval_exact_match(config),
    )
    wall = {h: sum(run["seconds"] for run in runs if run["harness"] == h) for h in ("leash", "lm_eval")}
    cpu = {h: sum(run["cpu_seconds"] for run in runs if run["harness"] == h) for h in ("leash", "lm_eval")}
    report |= {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "lm_eval_version": version("lm_eval"),
        "torch_version": version("torch"),
        "model_name": _shown(Path(args.model)),
        "max_new_tokens": args.max_new_tokens,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "commands": {name: " ".join(c) for name, c in commands(args, out).items()},
        "runs": runs,
        "wall_s": wall,
        "wall_ratio": wall["leash"] / wall["lm_eval"],
        "cpu_s": cpu,
        "cpu_ratio": cpu["leash"] / cpu["lm_eval"],
        "lm_eval_regexes": lm_eval_regexes(config),
        "out": str(out),
    }
    if args.repeats > 1:
        first = {h: _completions(out, h, 0) for h in ("leash", "lm_eval")}
        report["repeats_identical"] = all(
            _completions(out, h, r) == first[h] for h in first for r in range(1, args.repeats)
        )
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _shown(path: Path) -> str:
    """A path as the docs name it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.eval_vs_lm_eval",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="HF folder (default: make real-model's)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="GSM8K .jsonl (default: tests/data's test)")
    parser.add_argument("--limit", type=int, default=100, help="first N problems")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    parser.add_argument("--repeats", type=int, default=1, help="runs of each harness, in ABBA order (default 1)")
    parser.add_argument("--lm-eval-first", action="store_true", help="run lm-eval before leash (default: after)")
    parser.add_argument("--out", type=Path, help="folder for both runs and report.json (default: a temp folder)")
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = make_parser().parse_args(argv)
    try:
        report = run_bench(args)
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(markdown(report))
    print(f"files: {report['out']} (report.json, leash_<repeat>/, lm_eval_<repeat>/, task/, one log per run)")
    return report


if __name__ == "__main__":
    main()
