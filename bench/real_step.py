"""Where a real-model GRPO step's time goes on this machine, and what makes it faster without changing what is
learned: one settings arm at a time, each in its own process, side by side in one run.

    OMP_NUM_THREADS=2 python -m bench.real_step                       # SmolLM2 after the lab's SFT, 4 steps per arm
    python -m bench.real_step --model runs/real_model/model --steps 3 --arms fp32_t2 autocast_t2
    python -m bench.real_step --isa ALL AVX512_CORE AVX2 --arm-timeout 900   # the same arms under oneDNN ISA caps
    python -m bench.real_step --pair lora_t1   # two 1-thread runs at once against one 2-thread run
    OMP_NUM_THREADS=1 python -m bench.real_step --matmul   # seconds, no model: is bf16 fast on this CPU?

Each arm runs ``recipes.grpo`` on ``recipes/configs/real_lab/grpo_real_default.yaml`` (LoRA, 4 prompts x G 8, 32
new tokens) for ``--steps`` optimizer steps, the first (warm-up) left out of the medians. Clocks around TRL's own
methods split a step into generation, reward, monitors, old/ref log-probabilities, loss and backward, and the rest
(the optimizer). Each arm's speed is the first arm's step time over its own (2.00x = twice as fast).

Arms (``_t2``/``_t1``: 2 or 1 torch threads): ``fp32_*`` float32, ``fp32_head_*`` float32 scoring only completion
positions (what the compact head saves in float32); ``autocast_t2`` bf16 autocast with TRL as it is;
``autocast_head_t2`` also scoring only completion positions in TRL's fused LM head (the same numbers for about a
third of the head's work); ``autocast_head_cache_t2`` the recipe's CPU setting, also casting each weight once per
generation, not once per token; ``lora_bf16_t2`` a bf16 base (changes what is learned: reported, not adopted);
``lora_*``/``full_*`` the config as it is / full fine-tuning at the automatic precision; ``cb_t2`` TRL's continuous
batching. Only bf16 changes the numbers: ``--agreement`` measures log-probabilities and gradient against float32's.

``--isa`` reruns the arms under oneDNN ISA caps (``AVX512_CORE``: no bf16 units, ``AVX2``: a laptop), where bf16 is
emulated and slow, so ``--arm-timeout`` stops an arm and reports ``> N s a step``. ``--pair ARM`` compares two
1-thread runs at once with one 2-thread run. ``--matmul`` answers the bf16 question in seconds, with no model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from eval.jsonl import read_jsonl
from eval.report import table as markdown_table
from eval.tasks import get_task

# torch, transformers and TRL (and recipes.precision, which loads torch) are imported in the functions that use them,
# after the arguments are parsed: --help and a wrong flag answer without them. Each arm's process runs
# bench.real_step_arm's worker.

CONFIG = "recipes/configs/real_lab/grpo_real_default.yaml"
LORA = ["--use_peft", "true", "--lora_r", "16", "--lora_alpha", "32", "--lora_target_modules", "all-linear"]


@dataclass(frozen=True)
class Arm:
    threads: int
    flags: list[str] = field(default_factory=list)  # recipe flags
    patches: tuple[str, ...] = ()  # "completion_head": the compact head alone, for the whole arm


ARMS = {
    "fp32_t2": Arm(2, ["--bf16", "false"]),
    "fp32_t1": Arm(1, ["--bf16", "false"]),
    "fp32_head_t2": Arm(2, ["--bf16", "false"], ("completion_head",)),
    "fp32_head_t1": Arm(1, ["--bf16", "false"], ("completion_head",)),
    "autocast_t2": Arm(2, ["--bf16", "true", "--cpu_speedups", "false"]),
    "autocast_head_t2": Arm(2, ["--bf16", "true", "--cpu_speedups", "false"], ("completion_head",)),
    "autocast_head_cache_t2": Arm(2, ["--bf16", "true"]),
    "lora_bf16_t2": Arm(2, [*LORA, "--dtype", "bfloat16", "--bf16", "true"]),
    "full_t2": Arm(2, ["--use_peft", "false"]),
    "full_t1": Arm(1, ["--use_peft", "false"]),
    "lora_t2": Arm(2, LORA),
    "lora_t1": Arm(1, LORA),
    "cb_t2": Arm(2, ["--use_transformers_continuous_batching", "true"]),
}
DEFAULT_ARMS = ["fp32_t2", "autocast_t2", "autocast_head_t2", "autocast_head_cache_t2", "lora_bf16_t2"]
PHASES = ["generation", "reward", "monitors", "old/ref log-probabilities", "loss and backward", "optimizer and rest"]


def phases(step: dict) -> dict[str, float]:
    """One step's seconds by phase: the monitors' callbacks (run after the step) added, the rest what the named
    phases leave of the wall time."""
    wrappers, callbacks = step.get("monitor_wrappers", 0.0), step.get("monitor_callbacks", 0.0)
    out = {
        "generation": step.get("generate", 0.0),
        "reward": step.get("rewards", 0.0) - wrappers,
        "monitors": wrappers + callbacks,
        "old/ref log-probabilities": step.get("scoring_logps", 0.0),
        "loss and backward": step.get("training_step", 0.0) - step.get("prepare_inputs", 0.0),
    }
    out["optimizer and rest"] = step["wall"] - sum(out.values()) + callbacks
    out["total"] = step["wall"] + callbacks
    return out


def start_arm(name: str, model: str, data: str, steps: int, tmp: Path, isa: str | None, threads: int | None = None):
    """Start one arm's process (``threads`` overrides the arm's own count); returns (process, out_json, log)."""
    threads = threads or ARMS[name].threads
    tag = f"{name}_{isa or 'ALL'}_{threads}_{time.monotonic_ns()}"
    out_json, log_path = tmp / f"{tag}.json", tmp / f"{tag}.log"
    cmd = [sys.executable, "-m", "bench.real_step", "--worker", name, "--model", model, "--data", data]
    cmd += ["--steps", str(steps), "--worker-out", str(out_json)]
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa and isa != "ALL":
        env["ONEDNN_MAX_CPU_ISA"] = isa
    log = open(log_path, "w")  # noqa: SIM115 (closed in finish_arm)
    process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return process, out_json, log


def finish_arm(name: str, started, timeout: float | None) -> dict:
    """Wait for an arm's process (killed after ``timeout`` seconds); its steps, and ``stopped`` when killed."""
    process, out_json, log = started
    stopped = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        stopped = True
    killed_at = time.time()
    log.close()
    result = json.loads(out_json.read_text()) if out_json.exists() else {"steps": []}
    if process.returncode != 0 and not stopped:
        tail = Path(log.name).read_text()[-2000:]
        raise RuntimeError(f"arm {name} failed (exit {process.returncode}):\n{tail}")
    result["stopped"] = stopped
    if stopped and "running_since" in result:  # the step cut short had run this long: a lower bound for a step
        result["unfinished_step"] = killed_at - result["running_since"]
    return result


def run_arm(name, model, data, steps, tmp, isa=None, timeout=None, threads=None) -> dict:
    return finish_arm(name, start_arm(name, model, data, steps, tmp, isa, threads), timeout)


def median_step(result: dict, warmup: int) -> float | None:
    """The median seconds per step after the warm-up (None when no step after it finished)."""
    steps = result["steps"][warmup:]
    return statistics.median(phases(s)["total"] for s in steps) if steps else None


def stopped_step(result: dict) -> str:
    """What a stopped arm's steps say: how long the step it was cut in had run, and its warm-up step's time."""
    bound = f"> {result['unfinished_step']:.0f} s a step" if "unfinished_step" in result else "> ? s a step"
    warm = f"; warm-up step {result['steps'][0]['wall']:.0f} s" if result["steps"] else "; in its warm-up step"
    return f"{bound} (stopped{warm})"


def table(results: dict[str, dict], warmup: int, timeout: float | None = None) -> str:
    """Median seconds per step and phase per arm; speed: the first arm's step time over its own (2.00x = 2x faster)."""
    medians = {}
    for name, result in results.items():
        steps = result["steps"][warmup:]
        if not steps:
            medians[name] = None
            continue
        per_phase = [phases(s) for s in steps]
        medians[name] = {
            "wall": statistics.median(x["total"] for x in per_phase),
            **{p: statistics.median(x[p] for x in per_phase) for p in PHASES},
            "n": len(steps),
        }
    first = next(iter(medians))
    reference = medians[first]["wall"] if medians[first] else None
    rows = []
    for name, m in medians.items():
        result = results[name]
        kind = "bf16 autocast" if result.get("bf16") else "float32" if "bf16" in result else "?"
        if m is None:
            if result.get("stopped"):
                bound = result.get("unfinished_step")
                slower = f"< {reference / bound:.2f}x" if reference and bound else ""
                cells = [stopped_step(result), slower]
            else:
                cells = ["(no step after the warm-up)", ""]
            rows.append([name, ARMS[name].threads, kind, 0, *cells, *[""] * len(PHASES)])
            continue
        speed = f"{reference / m['wall']:.2f}x" if reference else "n/a"
        shares = [f"{m[p]:.3f} ({m[p] / m['wall']:.1%})" for p in PHASES]
        rows.append([name, ARMS[name].threads, kind, m["n"], f"{m['wall']:.2f}", speed, *shares])
    header = ["arm", "threads", "precision", "steps timed", "seconds per step", f"speed vs {first}", *PHASES]
    return markdown_table(header, rows)


def pair(name: str, model: str, data: str, steps: int, tmp: Path, isa: str | None, timeout: float | None) -> str:
    """Two 1-thread runs of arm ``name`` at once, then the same arm alone on 2 threads: steps per minute of the pair
    (summed) against the single run's. ``timeout`` stops each."""
    both = [start_arm(name, model, data, steps, tmp, isa, threads=1) for _ in range(2)]
    deadline = time.monotonic() + timeout if timeout else None
    together = [finish_arm(name, started, deadline and max(deadline - time.monotonic(), 0.1)) for started in both]
    alone = run_arm(name, model, data, steps, tmp, isa, timeout, threads=2)
    pair_steps = [median_step(r, 1) for r in together]
    alone_step = median_step(alone, 1)
    if None in pair_steps or alone_step is None:
        runs = [*together, alone]
        described = [
            f"{median_step(r, 1):.2f} s a step" if median_step(r, 1) is not None else stopped_step(r) for r in runs
        ]
        return (
            f"two 1-thread runs of {name} at once: {described[0]} and {described[1]}; one 2-thread run alone: "
            f"{described[2]} (--arm-timeout {timeout:.0f} s cut a run before a step after its warm-up)"
        )
    pair_rate = sum(60 / s for s in pair_steps)
    alone_rate = 60 / alone_step
    return (
        f"two 1-thread runs of {name} at once: {pair_steps[0]:.2f} and {pair_steps[1]:.2f} s per step, "
        f"{pair_rate:.2f} steps per minute together; one 2-thread run alone: {alone_step:.2f} s per step, "
        f"{alone_rate:.2f} steps per minute; the pair makes {pair_rate / alone_rate:.2f}x the steps of one run"
    )


def matmul(rounds: int = 5) -> str:
    """Seconds of one matmul of SmolLM2's MLP shape (256 rows, 576 -> 1536) in float32 and under bf16 autocast,
    alternated round by round: whether this CPU computes bf16 fast, in seconds where the step arms take minutes.
    """
    import torch

    torch.manual_seed(0)
    x, w = torch.randn(256, 576), torch.randn(1536, 576)

    def seconds(autocast: bool, calls: int) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            torch.nn.functional.linear(x, w)  # first call: allocations, kernel choice
            start = time.perf_counter()
            for _ in range(calls):
                torch.nn.functional.linear(x, w)
        return (time.perf_counter() - start) / calls

    timed_rounds = [(seconds(False, 40), seconds(True, 10)) for _ in range(rounds)]
    fp32 = statistics.median(r[0] for r in timed_rounds)
    bf16 = statistics.median(r[1] for r in timed_rounds)
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or "unset"
    return (
        f"one 256x576 @ 576x1536 matmul, {torch.get_num_threads()} thread(s), ONEDNN_MAX_CPU_ISA {cap}: float32 "
        f"{fp32 * 1e3:.2f} ms, bf16 autocast {bf16 * 1e3:.2f} ms (bf16 {bf16 / fp32:.2f}x the time of float32; "
        f"medians of {rounds} alternated rounds)"
    )


def agreement(model_path: str, data: str, seed: int = 0) -> str:
    """How far bf16 autocast moves a GRPO micro-batch's numbers from float32's: per precision, the largest change of a
    completion token's log-probability, the cosine of the policy gradient with float32's, and the forward and backward
    seconds (8 of the lab's prompts with the model's own answers, seeded advantages, TRL's fused LM head).
    """
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipes.cpu_speed import completion_positions_only

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    task = get_task("lab")
    prompts = [task.prompt(row["question"]) for row in read_jsonl(data)[:8]]
    texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        ids = model.generate(**batch, max_new_tokens=32, do_sample=True, pad_token_id=tokenizer.pad_token_id)
    mask = torch.cat([batch["attention_mask"], torch.ones_like(ids[:, batch["input_ids"].size(1) :])], dim=1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, : batch["input_ids"].size(1)] = -100  # only the completion is scored, as in GRPO
    advantages = torch.randn(ids.size(0), 1)
    trl_utils.add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))

    def gradient(autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        scored = labels[:, 1:] != -100
        loss = -(out.log_probs * advantages * scored).sum() / scored.sum()
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return out.log_probs[scored].detach(), grad

    start = time.perf_counter()
    reference_logps, reference_grad = gradient(False)
    lines = [f"float32: forward and backward {time.perf_counter() - start:.1f} s"]
    arms = (("float32 again", False), ("bf16 autocast", True), ("bf16 autocast, completion head", True))
    for name, autocast in arms:
        if "completion head" in name:
            completion_positions_only().__enter__()  # for the rest of this process
        start = time.perf_counter()
        logps, grad = gradient(autocast)
        took = time.perf_counter() - start
        # in float64: a float32 dot product over 135M entries drifts past 1 (float32 against itself read 1.023)
        cosine = torch.nn.functional.cosine_similarity(grad.double(), reference_grad.double(), dim=0).item()
        norms = grad.norm().item() / reference_grad.norm().item()
        lines.append(
            f"{name}: forward and backward {took:.1f} s; "
            f"largest log-probability change {(logps - reference_logps).abs().max().item():.4f} "
            f"(mean {(logps - reference_logps).abs().mean().item():.4f}, over {logps.numel()} completion tokens); "
            f"gradient cosine with float32 {cosine:.5f}, norm ratio {norms:.4f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        prog="python -m bench.real_step", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="runs/real_lab/sft/sft_smollm2/seed0", help="the lab's SFT model")
    parser.add_argument("--data", default="runs/real_lab/data/train.jsonl", help="the lab's training problems")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per arm (the first is warm-up)")
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=list(ARMS),
        help=f"first: the reference (default {' '.join(DEFAULT_ARMS)}; none with --pair or --agreement)",
    )
    parser.add_argument(
        "--isa", nargs="+", default=[None], metavar="ISA", help="oneDNN ISA caps to run the arms under (ALL: none)"
    )
    parser.add_argument("--arm-timeout", type=float, help="stop an arm after this many seconds")
    parser.add_argument("--pair", choices=[n for n, a in ARMS.items() if a.threads == 1], help="two runs at once")
    parser.add_argument("--agreement", action="store_true", help="bf16 against float32 numbers on one batch")
    parser.add_argument("--matmul", action="store_true", help="only time one matmul: float32 against bf16 autocast")
    parser.add_argument("--worker", choices=list(ARMS), help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from recipes import precision

    if args.arms is None:
        args.arms = [] if args.pair or args.agreement else DEFAULT_ARMS
    if args.worker:
        from bench.real_step_arm import worker

        worker(CONFIG, args.model, args.data, args.steps, ARMS[args.worker], Path(args.worker_out))
        return ""
    if args.matmul:  # no model, no data: seconds, on any CPU
        bf16, why = precision.cpu_bf16_choice(precision.cpu_flags(), precision.onednn_isa_cap())
        text = f"{matmul()}\nautomatic choice on this CPU: {'bf16 autocast' if bf16 else 'float32'} ({why})"
        print(text)
        return text
    if not (Path(args.model) / "config.json").exists():
        parser.error(f"no model at {args.model}: run `python -m cpu_lab.real` (its SFT stage) or pass --model")
    if not Path(args.data).is_file():
        parser.error(
            f"no training problems at {args.data}: `python -m cpu_lab.problems runs/real_lab/data` writes them"
        )
    if args.steps < 2:
        parser.error("--steps must be >= 2: the first step is warm-up")
    unknown = [isa for isa in args.isa if isa and isa.upper() not in precision.ONEDNN_ISAS]
    if unknown:
        parser.error(f"--isa {unknown[0]} is not a oneDNN ISA: use one of {', '.join(precision.ONEDNN_ISAS)}")
    started, texts = time.time(), []
    flags = precision.cpu_flags()
    with tempfile.TemporaryDirectory() as tmp:
        for isa in args.isa if args.arms else []:
            cap = isa.upper() if isa else None
            results = {}
            for name in args.arms:
                print(f"[bench] {name} (ISA {cap or 'ALL'}) ...", flush=True)
                results[name] = run_arm(name, args.model, args.data, args.steps, Path(tmp), cap, args.arm_timeout)
            bf16, why = precision.cpu_bf16_choice(flags, precision.onednn_isa_cap({"ONEDNN_MAX_CPU_ISA": cap or ""}))
            head = (
                f"oneDNN ISA {cap or 'ALL (no cap)'}: automatic choice {'bf16 autocast' if bf16 else 'float32'} ({why})"
            )
            texts.append(head + "\n\n" + table(results, warmup=1, timeout=args.arm_timeout))
            print("\n" + texts[-1], flush=True)
        if args.pair:
            print(f"[bench] pair {args.pair} ...", flush=True)
            texts.append(pair(args.pair, args.model, args.data, args.steps, Path(tmp), None, args.arm_timeout))
            print("\n" + texts[-1], flush=True)
    if args.agreement:
        texts.append(agreement(args.model, args.data))
        print("\n" + texts[-1], flush=True)
    load = os.getloadavg()
    print(
        f"\n{f'{args.steps} steps per arm (first left out), ' if args.arms or args.pair else ''}"
        f"model {args.model}, {time.time() - started:.0f} s in all; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}"
    )
    return "\n\n".join(texts)


if __name__ == "__main__":
    main()
