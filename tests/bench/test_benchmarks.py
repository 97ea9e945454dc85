"""The benchmarks measure what they say: bench/grpo_overhead.py (CPU, recipe vs plain TRL) and bench/grpo_gpu.py.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/bench/test_benchmarks.py          # fast + integration
OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q -m slow tests/bench/test_benchmarks.py  # the lab warm start's answers
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import grpo_gpu, grpo_overhead
from eval.jsonl import read_jsonl
from recipes.tiny_model import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]

# Runs a module with some installed packages made to look absent, as on the GPU machine: find_spec says None (the
# availability checks of transformers, TRL and peft use it) and importing raises.
ABSENT = """
import importlib.abc, importlib.util, runpy, sys
from eval.jsonl import read_jsonl
BLOCKED = {blocked!r}
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in BLOCKED else _find_spec(name, package))
sys.argv = [{module!r}, *{argv!r}]
runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""


def run_without(blocked: tuple[str, ...], module: str, argv: list[str]) -> subprocess.CompletedProcess:
    code = ABSENT.format(blocked=set(blocked), module=module, argv=argv)
    env = os.environ | {"OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.heavy  # builds a model
def test_gpu_bench_model_has_the_tokenizers_vocabulary(tmp_path):
    # the defect: a 151,936-row model decoded by a 400-token tokenizer, so sampled ids decoded to nothing
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = build_tokenizer()
    folder = grpo_gpu.build_model(tmp_path / "model", "toy", tokenizer, "cpu")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.vocab_size == len(tokenizer) and model.config.eos_token_id == tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1 + 2?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    torch.manual_seed(0)
    out = model.generate(**prompt, do_sample=True, max_new_tokens=16, num_return_sequences=8)
    texts = tokenizer.batch_decode(out[:, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert sum(bool(t.strip()) for t in texts) >= 7, texts


def test_gpu_bench_shapes_are_qwen25s():
    # Qwen/Qwen2.5-0.5B-Instruct and -1.5B-Instruct config.json; vocab_size deliberately absent (the tokenizer's)
    assert grpo_gpu.SHAPES["0.5b"] == dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    )
    assert grpo_gpu.SHAPES["1.5b"] == dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    )
    assert {(s, g, n) for s, g, n in grpo_gpu.MATRIX} == {("0.5b", g, n) for g in (4, 8) for n in (256, 512)} | {
        ("1.5b", 8, 512)
    }
    assert all(path.exists() for path in grpo_gpu.CONFIG_OF.values())


@pytest.mark.parametrize(
    "completions, share",
    [
        (["2 + 3 = 5\n#### 5", "#### 5", "#### 5"], 1.0),  # committed answers
        (["2 + 3 = 5\n#### 5", "I think it is 5"], 0.5),  # no marker: not an answer
        (["#### 5 or 6", "", [{"role": "assistant", "content": "#### 7"}]], 1 / 3),  # hedge, empty, conversational
    ],
)
def test_answer_share_counts_what_the_extractor_accepts(completions, share):
    assert grpo_overhead.answer_share(completions, "gsm8k") == pytest.approx(share)


@pytest.mark.integration
def test_gpu_bench_smoke_runs_both_arms_without_wandb_or_bitsandbytes(tmp_path):
    # the GPU machine has neither (nor vllm, matplotlib): the code path must not need them
    out = tmp_path / "gpu.json"
    blocked = ("wandb", "bitsandbytes", "vllm", "matplotlib")
    proc = run_without(blocked, "bench.grpo_gpu", ["--smoke", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["optional_modules_imported"] == []
    assert record["failed"] == [] and [row["shape"] for row in record["results"]] == ["toy", "toy_gc"]
    for row in record["results"]:  # the 0.5B config's path, then the 1.5B config's (gradient checkpointing)
        for arm in ("plain", "ours"):
            assert row[f"{arm}_steps"] == 2 and row[f"{arm}_median_s_per_step"] > 0
            assert row[f"{arm}_nonempty_share"] >= 0.9  # completions decode to text: rewards are timed on something


@pytest.mark.integration
def test_overhead_bench_runs_the_recipe_with_probes_and_heldout_eval(tmp_path, data_dir):
    # the defect: a benchmark of "the monitors" with probes and held-out evaluation switched off
    data = [
        "--data",
        str(data_dir / "gsm8k" / "train.jsonl"),
        "--eval_data",
        str(data_dir / "gsm8k" / "test.jsonl"),
        "--num_generations",
        "3",
        "--per_device_train_batch_size",
        "6",
    ]
    config = ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml"  # probes on 2 problems, eval every 2 steps
    result = grpo_overhead.main(
        ["--config", str(config), "--rounds", "1", "--steps", "2", "--warmup", "0", "--", *data]
    )
    assert result["monitor_eval_steps"] == 2 and result["probe_problems"] == 2
    ours_log = read_jsonl(Path(result["output_dirs"]["ours"][0]) / "log.jsonl")
    assert any("eval/accuracy" in record for record in ours_log)  # held-out eval ran inside the timed training
    assert any("probe/violations" in record for record in ours_log)  # probes too
    assert not (Path(result["output_dirs"]["plain"][0]) / "log.jsonl").exists()  # plain TRL: no monitors
    assert result["ours_callback_s"]["on_step_end"] > 0 and result["ours_callback_s"]["on_train_begin"] > 0
    assert result["completions_seen"] == {"plain": 12, "ours": 12}  # 2 steps x 2 prompts x G=3, every one read
    assert result["ratio_all_in"] > 0 and result["steps_timed_each"] == 2


@pytest.mark.slow
def test_overhead_bench_on_the_lab_warm_start_scores_real_answers():
    # the CPU lab's warm start answers most prompts, so the rewards parse and verify answers while timed
    result = grpo_overhead.main(["--rounds", "1", "--steps", "3", "--warmup", "1"])
    assert result["answer_share"]["plain"] > 0.5 and result["answer_share"]["ours"] > 0.5
    assert result["probe_problems"] > 0 and result["monitor_eval_steps"] > 0


def test_overhead_interval_is_paired_and_says_whether_it_decides_the_goal():
    # the defect: one ratio of two runs, reported without the spread that made it meaningless
    plain = [100.0, 130.0, 90.0, 120.0, 110.0, 95.0]
    drifting = [p * f for p, f in zip(plain, (1.02, 1.03, 1.01, 1.02, 1.03, 1.02), strict=True)]
    paired = grpo_overhead.paired_ratio(plain, drifting)
    assert paired["low"] < 1.02 < paired["high"] < 1.05 and paired["half_width_pct"] < 1.5  # load cancels in a pair
    assert grpo_overhead.verdict_line(paired, "wall").endswith("narrower than the ±5% goal); goal ratio <= 1.05: met")
    noise = (0.9, 1.2, 1.0, 1.15, 0.95, 1.1)
    noisy = grpo_overhead.paired_ratio(plain, [p * f for p, f in zip(plain, noise, strict=True)])
    assert noisy["half_width_pct"] > 5 and "NOT narrower" in grpo_overhead.verdict_line(noisy, "wall")
    jitter = (1.0, 1.01, 0.99, 1.0, 1.01, 1.0)
    slow = grpo_overhead.paired_ratio(plain, [p * 1.2 * f for p, f in zip(plain, jitter, strict=True)])
    assert grpo_overhead.verdict_line(slow, "wall").endswith("NOT met")
    one = grpo_overhead.paired_ratio([100.0], [103.0])
    assert one["ratio"] == pytest.approx(1.03) and "no interval" in grpo_overhead.verdict_line(one, "wall")


def test_checker_drift_runs_on_the_shipped_data_and_says_what_it_skips(tmp_path, capsys):
    from bench import checker_drift

    assert checker_drift.main(["--save", str(tmp_path / "v.json")]) == 0  # default --data: tests/data
    out = capsys.readouterr().out
    assert "qwen25math_math: skipped" in out and "--data DIR" in out  # the Qwen2.5-Math samples are not shipped
    assert set(json.loads((tmp_path / "v.json").read_text())) == {
        "mathcoder_gsm8k",
        "gpt3_gsm8k",
        "math500_references",
        "math_train_references",
    }
    assert checker_drift.main(["--compare", str(tmp_path / "v.json")]) == 0  # the same checkout: nothing flips
    with pytest.raises(SystemExit) as exit_info:
        checker_drift.main(["--data", str(tmp_path / "nothing")])
    assert exit_info.value.code == 2 and "pass --data DIR" in capsys.readouterr().err


class RecordingArm:
    """A stand-in arm: records its resets and the completions of each call; sleeps ``setup_s`` in reset and warm-up."""

    def __init__(self, name, setup_s=0.0):
        self.name, self.setup_s, self.calls = name, setup_s, []

    def reset(self):
        self.calls.append("reset")
        time.sleep(self.setup_s)

    def score(self, batch):
        if self.calls[-1] == "reset":  # the warm-up call
            time.sleep(self.setup_s)
        self.calls.append([completion for completion, _ in batch])
        return [False] * len(batch)


def passes_of(calls):
    """[(warm-up completions, [timed batches])], one per reset."""
    out = []
    for call in calls:
        if call == "reset":
            out.append([])
        else:
            out[-1].append(call)
    return [(p[0], p[1:]) for p in out]


def test_rewards_speed_both_arms_get_the_same_warm_up_outside_the_clock():
    from bench import rewards_speed

    groups = [rewards_speed.Group(str(i), (f"{i}a", f"{i}b")) for i in range(5)]
    warmup, batches = [("w", "1")], rewards_speed.batches_of(groups, 2)
    slow, fast = RecordingArm("leash", setup_s=0.2), RecordingArm("bare math-verify")
    log = []
    for arm in (slow, fast):  # which arm runs when
        arm.reset = (lambda reset, name: lambda: log.append(name) or reset())(arm.reset, arm.name)
    passes = rewards_speed.compare_arms([slow, fast], warmup, batches, repeats=3)
    assert all(p.seconds < 0.1 <= p.setup_seconds for p in passes["leash"])  # reset and warm-up: not on the clock
    assert all(p.seconds < 0.1 for p in passes["bare math-verify"])
    timed = [["0a", "0b", "1a", "1b"], ["2a", "2b", "3a", "3b"], ["4a", "4b"]]  # 2 prompts x G = 2 per call
    assert passes_of(slow.calls) == passes_of(fast.calls) == [(["w"], timed)] * 3
    assert log == ["leash", "bare math-verify", "bare math-verify", "leash", "leash", "bare math-verify"]


def test_rewards_speed_real_arms_reset_alike(monkeypatch):
    # the defect: leash's workers made their warm-up comparisons before the clock, bare math-verify made none
    from bench import rewards_speed
    from rewards._verify_worker import WARM_UP

    compared = []
    monkeypatch.setattr(rewards_speed, "verify", lambda gold, pred: compared.append((gold, pred)) or False)
    monkeypatch.setattr(rewards_speed, "parse", lambda text: text)
    rewards_speed.BareMathVerify().reset()
    assert compared == [(f"${gold}$", f"${pred}$") for gold, pred in WARM_UP]
    started = []
    monkeypatch.setattr(rewards_speed.verify_module, "warm_up", lambda: started.append("fresh workers"))
    monkeypatch.setitem(rewards_speed.verify_module._CACHE, ("1", "1"), rewards_speed.verify_module.Verdict.EQUAL)
    pool = rewards_speed.verify_module._POOL
    monkeypatch.setattr(pool, "_size", pool._size)  # put back after the test
    rewards_speed.Leash("math").reset()
    assert started == ["fresh workers"] and not rewards_speed.verify_module._CACHE  # its new workers make WARM_UP
    assert pool._size == 1  # by default one comparison at a time, as bare math-verify's one thread: like for like
    rewards_speed.Leash("math", workers=3).reset()
    assert pool._size == 3


def test_rewards_speed_ordinary_batches_are_the_sampled_groups_and_nothing_else(monkeypatch, capsys):
    # the defect: a power tower among the "ordinary" completions made one item 90% of bare math-verify's time
    from bench import rewards_speed
    from rewards.answers import extract_answer
    from rewards.cost import too_costly

    arms = []

    def recording(name):
        def make(*args):
            arms.append(RecordingArm(name))
            return arms[-1]

        return make

    monkeypatch.setattr(rewards_speed, "Leash", recording("leash"))
    monkeypatch.setattr(rewards_speed, "BareMathVerify", recording("bare math-verify"))
    monkeypatch.setattr(rewards_speed, "pathological_shares", lambda *args: None)
    rewards_speed.main(["--repeats", "2", "--pathological", "7", "--pathological-repeats", "1"])
    gsm8k_leash, gsm8k_bare, math_leash, math_bare, bad_leash, bad_bare = arms
    for task, leash, bare, path in (
        ("gsm8k", gsm8k_leash, gsm8k_bare, rewards_speed.GSM8K_GROUPS),
        ("math", math_leash, math_bare, rewards_speed.MATH_GROUPS),
    ):
        groups = rewards_speed.read_groups(path)
        assert {len(g.completions) for g in groups} == {8} and len(groups) == 16  # G = 8 completions to 16 prompts
        timed = [[c for g in groups[i : i + 4] for c in g.completions] for i in range(1, 16, 4)]
        assert passes_of(leash.calls) == passes_of(bare.calls) == [(list(groups[0].completions), timed)] * 2
        for completion in (c for g in groups for c in g.completions):
            assert too_costly(extract_answer(completion, task=task).raw or "") is None, completion[-80:]
    ((warmup, timed),) = passes_of(bad_leash.calls)
    assert passes_of(bad_bare.calls) == passes_of(bad_leash.calls)
    assert warmup == list(rewards_speed.read_groups(rewards_speed.MATH_GROUPS)[0].completions)
    assert len(timed) == 1 and len(timed[0]) == 7  # the pathological set: one call, timed apart
    answers = [extract_answer(c, task="math") for c in timed[0]]
    assert all(too_costly(a.raw) for a in answers if a.reason == "ok")
    assert sum(a.reason == "ok" for a in answers) == 6  # the seventh: two boxes that disagree, one a tower
    out = capsys.readouterr().out
    assert "ratio bare/leash min" in out and "verdicts agree on 120/120" in out and "pathological set: 7" in out


def test_rewards_speed_scores_real_batches_with_both_arms(tmp_path):
    # the real arms on two tiny files, one of each layout: verdicts compared, each arm timed per repeat
    from bench import rewards_speed
    from eval.jsonl import write_jsonl

    rows = [
        {"answer": "18", "completions": ["so 18\n#### 18", "#### 17"]},  # the warm-up prompt
        {"answer": "4", "completions": ["#### 4", "I think 5"]},
        {"answer": "3", "completions": ["#### 3.00", "#### 3"]},
    ]
    write_jsonl(rows, tmp_path / "gsm8k.jsonl")
    math_rows = [{"gold": r["answer"], "samples": [{"completion": f"\\boxed{{{r['answer']}}}"}] * 2} for r in rows]
    write_jsonl(math_rows, tmp_path / "math.jsonl")
    argv = ["--gsm8k", str(tmp_path / "gsm8k.jsonl"), "--math", str(tmp_path / "math.jsonl"), "--repeats", "1"]
    results = rewards_speed.main([*argv, "--pathological", "0", "--prompts-per-batch", "1"])
    assert results["gsm8k"]["n"] == 4 and results["gsm8k"]["correct"]["leash"] == 3
    assert results["math"]["correct"] == {"leash": 4, "bare math-verify": 4} and results["math"]["agree"] == 4
    assert all(len(r["ratios"]) == 1 and r["ratios"][0] > 0 for r in results.values())


@pytest.mark.heavy  # starts a process
def test_rewards_speed_names_a_missing_or_unreadable_file_in_one_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "no completions"}\n')
    for argv, words in (
        (["--math", str(tmp_path / "nothing.jsonl")], "--math"),
        (["--gsm8k", str(tmp_path / "bad.jsonl")], "row 1: no completions"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "bench.rewards_speed", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2 and done.stderr.startswith("error: ") and words in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1


@pytest.mark.heavy  # starts a process
def test_bench_data_flags_name_a_missing_folder_in_one_line(tmp_path):
    for module in ("bench.eval_speed",):
        done = subprocess.run(
            [sys.executable, "-m", module, "--data", str(tmp_path / "nothing")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stderr.startswith("error: ") and "--data" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1


# bench/eval_vs_lm_eval.py: leash's eval against lm-evaluation-harness. lm-eval's metric as its gsm8k.yaml writes it.
LM_EVAL_GSM8K_METRIC = {
    "metric_list": [
        {"metric": "exact_match", "ignore_case": True, "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}
    ]
}


def _lm_eval_line(doc_id, completion, strict, flexible):
    """Two lines of lm-eval's --log_samples file for one problem: one per filter, (answer read, verdict) each."""
    prompt = {"gen_args_0": {"arg_0": f"prompt {doc_id}", "arg_1": {"until": []}}}
    return [
        {"doc_id": doc_id, "resps": [[completion]], "arguments": prompt, "filter": name}
        | {"filtered_resps": [read or "[invalid]"], "exact_match": float(right)}
        for name, (read, right) in (("strict-match", strict), ("flexible-extract", flexible))
    ]


def test_lm_eval_comparison_names_each_disagreement_and_its_cause(tmp_path):
    # stored per-sample files in each harness's format: leash's samples.jsonl (eval score) and lm-eval's log
    from bench import eval_vs_lm_eval
    from eval.jsonl import write_jsonl
    from eval.predictions import score_predictions

    cases = [  # leash's completion, gold, lm-eval's completion, lm-eval's (read, verdict) per filter
        ("3 + 5 = 8\n#### 8", "8", None, ("8", True), ("8", True)),  # all agree
        ("#### 18.00", "18", None, ("18.00", False), ("18.00", False)),  # lm-eval compares strings: both disagree
        ("#### 17\nno wait\n#### 18", "18", None, ("17", False), ("18", True)),  # first vs last marker: agree
        ("#### 17 or 18", "17", None, ("17", True), ("18", False)),  # a hedge: strict disagrees
        ("so 5", "5", "so 6", (None, False), ("6", False)),  # the generations differ
    ]
    predictions = tmp_path / "preds.jsonl"
    write_jsonl([{"completion": c[0], "answer": c[1]} for c in cases], predictions)
    score_predictions("gsm8k", predictions, tmp_path / "leash")
    leash = read_jsonl(tmp_path / "leash" / "samples.jsonl")
    log = tmp_path / "lm_eval" / "model" / "samples_leash_gsm8k_2026-01-01.jsonl"
    log.parent.mkdir(parents=True)
    lines = [line for i, c in enumerate(cases) for line in _lm_eval_line(i, c[2] or c[0], c[3], c[4])]
    write_jsonl(lines, log)
    lm_eval = eval_vs_lm_eval.read_lm_eval_samples(tmp_path / "lm_eval")
    assert lm_eval[1]["filters"]["strict-match"] == {"extracted": "18.00", "correct": False}
    assert lm_eval[4]["filters"]["strict-match"]["extracted"] is None  # "[invalid]": nothing matched
    prompts = [f"prompt {i}" for i in range(5)]

    def exact_match(prediction, reference):  # lm-eval's metric, as the regexes of its gsm8k.yaml define it
        config = LM_EVAL_GSM8K_METRIC
        return eval_vs_lm_eval.lm_eval_string(prediction, config) == eval_vs_lm_eval.lm_eval_string(reference, config)

    config = LM_EVAL_GSM8K_METRIC
    report = eval_vs_lm_eval.compare_runs(leash, lm_eval, config, prompts=prompts, exact_match=exact_match)
    assert (report["n"], report["identical_prompts"], report["identical_completions"]) == (5, 5, 4)
    strict, lenient = report["strict"], report["lenient"]
    assert (strict["agree"], strict["same_text_agree"], strict["read_agree"]) == (3, 3, 3)  # 2 and 3: hedges
    assert (lenient["agree"], lenient["same_text_agree"], lenient["read_agree"]) == (3, 4, 4)  # 4: "so 5" vs "so 6"
    assert (strict["planted_n"], strict["planted_agree"]) == (4, 1)  # gold := lm-eval's answer, right to lm-eval
    assert (lenient["planted_n"], lenient["planted_agree"]) == (5, 3)
    assert (strict["leash"], strict["lm_eval"]) == (2, 2)
    found = {(d["index"], d["rule"]): d for d in report["disagreements"]}
    assert sorted(found) == [(1, "lenient"), (1, "strict"), (2, "strict"), (3, "strict"), (4, "lenient")]
    assert found[2, "strict"]["differs_in"] == ["answer read", "planted-gold verdict"]  # both wrong, but not alike
    assert found[1, "strict"]["cause"].startswith("equality: both read '18.00'; leash compares numbers (18 vs 18)")
    assert "lm-eval strings ('18.00' vs '18')" in found[1, "lenient"]["cause"]
    assert found[3, "strict"]["cause"].startswith("extraction: leash reads the last '####'")
    assert "(reason hedge)" in found[3, "strict"]["cause"] and "conflicting_markers" in found[2, "strict"]["cause"]
    assert found[4, "lenient"]["cause"] == "generation: the two completions differ"
    text = eval_vs_lm_eval.markdown(
        report | {"lm_eval_version": "x", "model_name": "m", "max_new_tokens": 8, "batch_size": 1, "threads": 1}
    )
    assert "| strict | strict-match | 2/5 | 2/5 | 3/5 (60.0%) | 3/5 (60.0%) | 3/5 (60.0%) | 1/4 (25.0%) |" in text
    assert "goal (>= 99% same verdict on each rule): NOT met" in text and "lm-eval's ends 'so 6'" in text


def test_lm_eval_bench_without_lm_eval_names_the_install(monkeypatch, capsys):
    import importlib.util

    from bench import eval_vs_lm_eval

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else real(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        eval_vs_lm_eval.main(["--limit", "2"])
    assert exit_info.value.code == 2
    assert "lm-eval is not installed: pip install -r requirements-bench.txt" in capsys.readouterr().err


@pytest.mark.integration
def test_lm_eval_bench_on_the_tiny_model_agrees_on_identical_text(tiny_model_dir, data_dir, tmp_path):
    # the whole bench, both harnesses as processes; one problem per batch, so no padding can make the texts differ
    pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install -r requirements-bench.txt")
    from bench import eval_vs_lm_eval

    argv = ["--model", str(tiny_model_dir), "--data", str(data_dir / "gsm8k" / "test.jsonl"), "--limit", "3"]
    report = eval_vs_lm_eval.main([*argv, "--max-new-tokens", "8", "--batch-size", "1", "--out", str(tmp_path)])
    assert (report["n"], report["identical_prompts"], report["identical_completions"]) == (3, 3, 3)
    assert report["strict"]["share"] == report["lenient"]["share"] == 1.0
    assert report["strict"]["read_share"] == report["lenient"]["read_share"] == 1.0
    assert [(run["harness"], run["repeat"]) for run in report["runs"]] == [("leash", 0), ("lm_eval", 0)]
    assert report["wall_s"]["leash"] > 0 and report["wall_ratio"] > 0
    assert report["lm_eval_regexes"]["flexible-extract"] == ["(-?[$0-9.,]{2,})|(-?[0-9]+)", -1]
    assert json.loads((tmp_path / "report.json").read_text())["n"] == 3


def test_eval_speed_times_a_saved_model_at_each_batch_size_on_the_same_prompts(tiny_model_dir):
    from bench import eval_speed

    rows = eval_speed.time_generation(
        eval_speed.DATA, n_prompts=6, max_new_tokens=5, batch_sizes=[1, 3, 6], model_dir=str(tiny_model_dir)
    )
    *timed, info = rows
    assert [r["batch_size"] for r in timed] == [1, 3, 6] and info["threads"] >= 1
    assert len({r["tokens"] for r in timed}) == 1  # greedy: the same tokens whatever the batch
    assert all(r["tokens_per_s"] > 0 for r in timed)


def test_eval_speed_times_an_adapter_beside_and_merged_and_counts_the_same_answers(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from bench import eval_speed

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)  # random B: not the base
    get_peft_model(model, lora).save_pretrained(tmp_path)
    *_, info = eval_speed.time_generation(eval_speed.DATA, 4, 5, [4], model_dir=str(tiny_model_dir))
    timed = eval_speed.time_adapter(str(tiny_model_dir), str(tmp_path), info["prompts"], 5, 4, rounds=1)
    assert timed["beside"] > 0 and timed["merged"] > 0
    assert timed["n"] == 4 and timed["same"] == 4  # float32: the merge changes no greedy answer here


@pytest.mark.heavy  # starts a process
def test_eval_speed_refuses_batch_sizes_that_are_not_whole_numbers():
    done = subprocess.run(
        [sys.executable, "-m", "bench.eval_speed", "--batch-sizes", "16,x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--batch-sizes '16,x'" in done.stderr and done.stderr.count("\n") == 1


def test_stats_follow_a_run_two_names_deep(tmp_path):
    """What a reader of the start file reaches: the definitions it names (hop 1), those they name (hop 2), followed
    through a re-export, each counted by its own lines; what only a third hop or nobody names is not counted."""
    from bench import stats

    package = tmp_path / "recipes"
    package.mkdir()
    files = {
        "start.py": "from recipes import helpers\nfrom recipes.reexport import g\n\n\ndef main():\n    helpers.f()\n"
        "    return g\n",
        "helpers.py": "from recipes.deep import h\n\nLIMIT = 3\n\n\ndef f():\n    # a comment\n    return h() + LIMIT\n"
        "\n\ndef unused():\n    return 1\n",
        "reexport.py": "from recipes.deep import g\n",
        "deep.py": 'def g():\n    return 1\n\n\ndef h():\n    """Hop 3: deeper."""\n    return deeper()\n'
        "\n\ndef deeper():\n    return 3\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    start = package / "start.py"
    named = {(path.name, name): n for (path, name), n in stats.reached_within(start, 2, root=tmp_path).items()}
    assert named == {("helpers.py", "f"): 2, ("deep.py", "g"): 2, ("helpers.py", "LIMIT"): 1, ("deep.py", "h"): 2}
    one = {(path.name, name) for path, name in stats.reached_within(start, 1, root=tmp_path)}
    assert one == {("helpers.py", "f"), ("deep.py", "g")}
    real = stats.reached_within(stats.ROOT / "recipes" / "grpo.py", 2)
    assert any(path.name == "grpo_setup.py" and name == "check_args" for path, name in real)


def test_stats_give_every_line_a_run_reaches_one_kind():
    """The lines within two hops by kind add up to the total, and none is unclassified: a module or definition new on
    a GRPO run's path gets its kind in bench/stats.py (``MODULE_KINDS``, ``DEFINITION_KINDS``)."""
    from bench import stats

    start = stats.ROOT / "recipes" / "grpo.py"
    reached = stats.reached_within(start, 2)
    kinds = stats.by_kind(start, reached)
    assert sum(kinds.values()) == stats.lines(start) + sum(reached.values())
    unclassified = sorted(
        f"{path.relative_to(stats.ROOT).as_posix()}:{name}"
        for path, name in reached
        if stats.kind_of(path.relative_to(stats.ROOT).as_posix(), name) == "unclassified"
    )
    assert unclassified == [] and kinds["unclassified"] == 0
    assert stats.kind_of("recipes/common.py", "run_cli") == "glue" and stats.kind_of("recipes/common.py", "x") == "run"
    assert stats.kind_of("recipes/new_module.py", "f") == "unclassified"


def test_stats_count_code_lines_and_follow_imports_two_hops(tmp_path):
    from bench import stats

    sample = tmp_path / "m.py"
    doc = '"""A docstring\n\nof three lines."""\n\n# a comment\n'
    sample.write_text(doc + 'import os  # code\n\n\ndef f():\n    """One."""\n    return os\n')
    assert stats.lines(sample) == 3  # import, def, return
    two = {p.relative_to(stats.ROOT).as_posix() for p in stats.within_hops(stats.ROOT / "recipes" / "grpo.py", 2)}
    one = {p.relative_to(stats.ROOT).as_posix() for p in stats.within_hops(stats.ROOT / "recipes" / "grpo.py", 1)}
    assert "recipes/grpo.py" in one and "recipes/common.py" in one and one < two
    assert not any(path.startswith("tests/") for path in two)
    assert stats.longest_cell("| a | bcd |\n|---|---|\n| xx | y |\n") == 3
    assert stats.config_keys(tmp_path) == 0
    (tmp_path / "c.yaml").write_text("# header: not a key\nbase: b.yaml\nmax_steps: 3  # a comment\n  nested: 1\n")
    assert stats.config_keys(tmp_path) == 2
