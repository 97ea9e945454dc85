"""Command line of leash eval: run a benchmark, re-score stored completions, compare runs, merge a LoRA run into a full
model, measure forgetting.

    python -m eval run --model Qwen/Qwen2.5-0.5B-Instruct --task gsm8k --out runs/eval/base
    python -m eval run --model Qwen/Qwen2.5-0.5B-Instruct --task math500 --data data/math500/test.jsonl \\
        --adapter runs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04 --limit 100 --out runs/eval/grpo
    python -m eval run --model M --task gsm8k --num-samples 8 --temperature 0.8 --out runs/eval/pass8
    python -m eval score --task gsm8k --predictions preds.jsonl --completion-field completion --out runs/eval/vllm
    python -m eval compare runs/eval/base runs/eval/grpo
    python -m eval passk runs/eval/sft runs/eval/grpo --ks 1,2,4,8 --png runs/eval/passk.png
    python -m eval merge --adapter runs/gsm8k/qwen2.5-0.5b-instruct/grpo_lora_b0.04 --out runs/merged/grpo_lora
    python -m eval forgetting --base runs/real_model/model --model runs/gsm8k/smollm2/grpo_lora \\
        --data chat.jsonl --field messages --limit 200 --out runs/eval/forgetting

Every argument is checked before a model loads; each error is one line naming the fix. Without ``--data`` the data
comes from the hub (``python -m eval.data --out data`` writes offline copies). An interrupted ``run`` continues when
the same command is run again; an ``--out`` folder holding anything else is refused unless ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

from safetensors import safe_open

from eval.fingerprint import source_fingerprint
from eval.folder import (
    LENGTHS_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    check_not_training_run,
    lock_output_folder,
    prepare_folder,
    read_run,
)
from eval.forgetting import DEFAULT_BATCH_SIZE as FORGETTING_BATCH_SIZE
from eval.forgetting import (
    DEFAULT_MAX_LENGTH,
    FORGETTING_FILE,
    check_same_vocabulary,
    document_scores,
    encode_documents,
    forgetting_lines,
    read_reference,
    summarize_forgetting,
)
from eval.generate import check_backend
from eval.jsonl import read_jsonl
from eval.merge import MERGE_DTYPES, check_merge, merge_adapter
from eval.metrics import compare_records, has_lenient, normal_quantile
from eval.passk import check_same_problems, parse_ks, passk_markdown, plot_pass_at_k, samples_per_problem
from eval.predictions import read_predictions, score_predictions, score_settings
from eval.report import compare_markdown
from eval.run import DEFAULT_BATCH_SIZE, default_max_new_tokens, evaluate, load_problems, log_to_wandb, run_settings
from eval.sources import check_model_source
from eval.tasks import TASKS, get_task

BENCHMARKS = ("gsm8k", "math500")
RUN_DTYPES = ("auto", "bfloat16", "float16", "float32")
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "config.json")  # any of them: AutoTokenizer loads it


def confidence_level(text: str) -> float:
    """``--ci-level``: a fraction strictly between 0 and 1 (0.95, not 95)."""
    try:
        level = float(text)
        normal_quantile(level)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return level


def add_ci_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ci-level", type=confidence_level, default=0.95, help="confidence level of the intervals (default 0.95)"
    )


def add_output(parser: argparse.ArgumentParser, out: str) -> None:
    """What ``run`` and ``score`` write to: ``--out`` (``out`` says what it does with an earlier run), W&B, the
    intervals' level, and ``--overwrite``."""
    parser.add_argument(
        "--wandb", action="store_true", help="log summary and samples table to W&B (WANDB_MODE=offline works)"
    )
    add_ci_level(parser)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what --out holds of another run (other settings, another model, other predictions); "
        "without it such a folder is refused, and the same run resumes either way",
    )
    parser.add_argument("--out", required=True, help=f"output folder; {out}")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="generate answers with a model and score them")
    run.add_argument("--model", required=True, help="local folder or hub id of a causal LM")
    run.add_argument("--adapter", help="LoRA adapter folder (peft) to apply on --model")
    run.add_argument("--task", required=True, help=f"one of {sorted(TASKS)}")
    run.add_argument(
        "--data", help="local .jsonl or hub id (default: the task's hub data; python -m eval.data writes local ones)"
    )
    run.add_argument("--limit", type=int, help="evaluate the first N problems only")
    run.add_argument(
        "--seed",
        type=int,
        default=0,
        help="sampling seed: problem i (with hf, the batch starting at it) samples with seed + i, so a resumed run "
        "samples as a fresh one (default 0; no effect on greedy decoding)",
    )
    run.add_argument("--num-samples", type=int, default=1, help="K samples per problem; pass@k is reported for K>1")
    run.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    run.add_argument("--max-new-tokens", type=int, help="generation budget (default: 1024 gsm8k, 2048 math500)")
    run.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help=f"problems per generation call with hf (memory grows with it); vllm takes all pending prompts at once "
        f"(default {DEFAULT_BATCH_SIZE})",
    )
    run.add_argument("--backend", default="hf", help="hf (transformers generate) or vllm")
    run.add_argument("--dtype", default="auto", help=f"model dtype: {', '.join(RUN_DTYPES)} (default auto)")
    run.add_argument(
        "--ignore-adapter-base",
        action="store_true",
        help="skip the adapter's base-model NAME check (shapes are still checked)",
    )
    add_output(run, "an unfinished run there (same settings, same model) is resumed")

    score = sub.add_parser("score", help="score stored completions (no model)")
    score.add_argument("--task", required=True, help=f"one of {sorted(TASKS)}")
    score.add_argument("--predictions", required=True, help="JSONL with one completion per line")
    score.add_argument(
        "--completion-field",
        default="completion",
        help="field holding the completion: a string, chat messages, or a list of K strings (default: completion)",
    )
    score.add_argument("--gold-field", help="field holding the gold answer (default: the task's, 'answer')")
    score.add_argument("--tokenizer", help="tokenizer folder or hub id to count completion tokens")
    add_output(score, "an earlier scoring of the same file there is scored again")

    compare = sub.add_parser("compare", help="before/after table of two output folders")
    compare.add_argument("dir_a", help="output folder of the first run (A, e.g. before training)")
    compare.add_argument("dir_b", help="output folder of the second run (B); the table shows B - A")
    add_ci_level(compare)

    passk = sub.add_parser("passk", help="pass@k curves of several output folders side by side")
    passk.add_argument(
        "dirs",
        nargs="+",
        help="output folders of `eval run|score` on the same problems; the first (A) is the baseline of the "
        "differences B - A, C - A, ...",
    )
    passk.add_argument(
        "--ks", type=parse_ks, help="the table's rows, e.g. 1,2,4,8,16 (default: 1, 2, 4, ... up to the largest K)"
    )
    passk.add_argument("--png", help="also plot every folder's pass@k for k = 1..K to this PNG")
    add_ci_level(passk)

    merge = sub.add_parser(
        "merge", help="merge a LoRA run into a full model folder (for vLLM and tools that load one folder)"
    )
    merge.add_argument("--adapter", required=True, help="the LoRA run folder (peft adapter_config.json)")
    merge.add_argument(
        "--base",
        help="the model the adapter was trained on: local folder or hub id (default: the adapter's "
        "base_model_name_or_path, which must be here)",
    )
    merge.add_argument(
        "--dtype",
        help=f"dtype of the merged weights: {', '.join(MERGE_DTYPES)} (default: the base model's); the merge itself "
        "is done in float32",
    )
    merge.add_argument(
        "--ignore-adapter-base",
        action="store_true",
        help="skip the check that --base is the model the adapter names (shapes are still checked)",
    )
    merge.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty --out, replacing the model and tokenizer files there (other files are kept)",
    )
    merge.add_argument("--out", required=True, help="folder for the merged model and its tokenizer")

    forgetting = sub.add_parser(
        "forgetting", help="KL(base || model) and log-likelihood change on reference text that is not the task"
    )
    forgetting.add_argument("--base", required=True, help="the model before fine-tuning: local folder or hub id")
    forgetting.add_argument(
        "--model",
        required=True,
        help="the fine-tuned model: a full model folder (or hub id) with --base's tokenizer, or a LoRA run folder "
        "(peft adapter_config.json) trained on --base",
    )
    forgetting.add_argument(
        "--ignore-adapter-base",
        action="store_true",
        help="skip the check that an adapter --model names --base as its base model (shapes are still checked)",
    )
    forgetting.add_argument("--data", required=True, help="JSONL of reference documents, one a line")
    forgetting.add_argument(
        "--field",
        default="text",
        help="field of a document: a string (plain text) or a list of chat messages, rendered with --base's chat "
        "template (default: text)",
    )
    forgetting.add_argument("--limit", type=int, help="the first N documents only (default: all)")
    forgetting.add_argument(
        "--max-length",
        type=int,
        default=DEFAULT_MAX_LENGTH,
        help=f"documents are cut to this many tokens (default {DEFAULT_MAX_LENGTH})",
    )
    forgetting.add_argument(
        "--batch-size",
        type=int,
        default=FORGETTING_BATCH_SIZE,
        help=f"documents per forward pass; memory grows as batch x length x vocabulary (default "
        f"{FORGETTING_BATCH_SIZE})",
    )
    add_ci_level(forgetting)
    forgetting.add_argument("--out", required=True, help="output folder: forgetting.json is written there")
    return parser


def check_adapter(
    adapter: str,
    model: str,
    ignore_base_name: bool = False,
    adapter_flag: str = "--adapter",
    model_flag: str = "--model",
) -> None:
    """Raise a clear error when a LoRA adapter cannot apply to ``model``; reads only its config (layers on the meta
    device), so no weights load."""
    folder = Path(adapter)
    config_path = folder / "adapter_config.json"
    if not folder.is_dir():
        raise FileNotFoundError(f"{adapter_flag} {adapter}: no such folder; pass the folder peft saved")
    if not config_path.exists():
        raise FileNotFoundError(f"{adapter_flag} {adapter}: no adapter_config.json there; pass the folder peft saved")
    adapter_config = json.loads(config_path.read_text())
    base = adapter_config.get("base_model_name_or_path")
    if base and not ignore_base_name and Path(base.rstrip("/")).name.lower() != Path(model.rstrip("/")).name.lower():
        raise ValueError(
            f"{adapter_flag} {adapter} was trained on {base!r}, not on {model_flag} {model!r}: pass the matching "
            f"{model_flag} (or --ignore-adapter-base when it is the same model under another name)"
        )
    import torch  # torch, transformers: seconds; `eval score`, `eval compare` and --help need neither
    from transformers import AutoConfig, AutoModelForCausalLM  # as torch

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    linear = {name: m for name, m in skeleton.named_modules() if isinstance(m, torch.nn.Linear)}
    targets = adapter_config.get("target_modules")
    if isinstance(targets, list):
        suffixes = {name.rsplit(".", 1)[-1] for name in linear}
        missing = sorted(t for t in targets if t not in suffixes and t != "all-linear")
        if missing:
            raise ValueError(
                f"{adapter_flag} {adapter} targets modules {missing} that {model_flag} {model} does not have "
                f"(its linear layers: {sorted(suffixes)}): the adapter belongs to another architecture"
            )
    weights = folder / "adapter_model.safetensors"
    if weights.exists():
        with safe_open(str(weights), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a dict
                for part, dim in ((".lora_A.", 1), (".lora_B.", 0)):
                    if part not in key:
                        continue
                    module_name = key.split(part)[0].removeprefix("base_model.model.")
                    layer = linear.get(module_name)
                    if layer is None:
                        continue
                    expected = layer.in_features if dim == 1 else layer.out_features
                    got = f.get_slice(key).get_shape()[dim]
                    if got != expected:
                        raise ValueError(
                            f"{adapter_flag} {adapter}: {key} has size {got} where {module_name} of {model_flag} "
                            f"{model} needs {expected}: the adapter was trained on a model of another size"
                        )


def load_model(model_name: str, adapter: str | None, dtype: str, backend: str):
    """The model and tokenizer for generation (a ``vllm.LLM`` for the vllm backend)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # as in check_adapter

    tokenizer = AutoTokenizer.from_pretrained(model_name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if backend == "vllm":
        from vllm import LLM  # installed on GPU machines only (requirements-gpu.txt)

        return LLM(model=model_name, dtype=dtype), tokenizer
    import torch  # as in check_adapter

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_name, dtype=dtype).to(device)
    if adapter:
        from peft import PeftModel  # about 10 s to import on a busy CPU: paid with --adapter only

        model = PeftModel.from_pretrained(model, adapter)
        if model.dtype == torch.float32:  # merged: no side matmuls a token (bench.eval_speed --adapter times both);
            model = model.merge_and_unload()  # in bf16/fp16 the merge would round a small update away: kept aside
    return model, tokenizer


def check_run_numbers(args) -> None:
    """The settings of ``eval run`` that no model can make sense of, each refused in one line."""
    if args.dtype not in RUN_DTYPES:
        raise ValueError(f"--dtype {args.dtype}: pass one of {', '.join(RUN_DTYPES)}")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(f"--temperature {args.temperature}: pass 0 (greedy) or more")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit {args.limit}: pass 1 or more problems (or leave it out for all of them)")
    for flag, value in (
        ("--num-samples", args.num_samples),
        ("--max-new-tokens", args.max_new_tokens),
        ("--batch-size", args.batch_size),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{flag} {value}: pass 1 or more")


def print_written(out: str | Path) -> None:
    """The summary, then where the folder is and which of its files to open."""
    out = Path(out)
    print((out / SUMMARY_FILE).read_text())
    files = [name for name in (SUMMARY_FILE, RESULTS_FILE, SAMPLES_FILE, LENGTHS_FILE) if (out / name).exists()]
    print(f"written to {out}: {', '.join(files)}")


def cmd_run(args) -> dict:
    # Everything that can be wrong is checked here, before the (slow, large) model load.
    task = get_task(args.task)
    check_run_numbers(args)
    if args.backend == "vllm" and args.adapter:
        raise ValueError(
            f"--backend vllm loads full models only, not an adapter: merge it into one first (python -m eval merge "
            f"--adapter {args.adapter} --out MERGED), then pass --model MERGED"
        )
    check_backend(args.backend)
    check_not_training_run(args.out, "run")
    if args.num_samples > 1 and args.temperature == 0:
        raise ValueError("--num-samples > 1 with greedy decoding gives K identical answers: set --temperature > 0")
    check_model_source(args.model, "--model")  # a local folder, or a hub id in the cache or on a hub that answers
    if args.adapter:
        check_adapter(args.adapter, args.model, args.ignore_adapter_base)
    load_problems(task, args.data, args.limit)
    max_new_tokens = args.max_new_tokens or default_max_new_tokens(args.task)
    run_info = {"model": args.model, "adapter": args.adapter}
    run_info["model_fingerprint"] = source_fingerprint(args.model, args.adapter)
    settings = {"data": args.data, "limit": args.limit, "seed": args.seed, "max_new_tokens": max_new_tokens}
    settings |= {"temperature": args.temperature, "num_samples": args.num_samples, "backend": args.backend}

    with lock_output_folder(args.out) as out:  # a second run into this folder is refused now, before its model loads
        prepare_folder(out, run_settings(task, **settings, run_info=run_info), args.overwrite)  # another run's: refused
        model, tokenizer = load_model(args.model, args.adapter, args.dtype, args.backend)
        results = evaluate(
            model,
            tokenizer,
            args.task,
            data=args.data,
            limit=args.limit,
            seed=args.seed,
            max_new_tokens=max_new_tokens,
            batch_size=args.batch_size,
            out_dir=out,
            num_samples=args.num_samples,
            temperature=args.temperature,
            backend=args.backend,
            run_info=run_info,
            wandb=args.wandb,
            ci_level=args.ci_level,
            overwrite=args.overwrite,
        )
    print_written(args.out)
    return results


def cmd_score(args) -> dict:
    task = get_task(args.task)
    read_predictions(args.predictions, args.completion_field, args.gold_field or task.gold_field)
    tokenizer = None
    if args.tokenizer:
        check_model_source(args.tokenizer, "--tokenizer", files=TOKENIZER_FILES)
    check_not_training_run(args.out, "score")
    config = score_settings(args.task, args.predictions, args.completion_field, args.gold_field, args.tokenizer)
    with lock_output_folder(args.out) as out:  # another run's folder is refused before the tokenizer loads
        prepare_folder(out, config, args.overwrite)
        if args.tokenizer:
            from transformers import AutoTokenizer  # seconds: paid with --tokenizer only

            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        results = score_predictions(
            args.task,
            args.predictions,
            out,
            completion_field=args.completion_field,
            gold_field=args.gold_field,
            tokenizer=tokenizer,
            ci_level=args.ci_level,
            overwrite=args.overwrite,
        )
    if args.wandb:
        records = read_jsonl(Path(args.out) / SAMPLES_FILE)
        log_to_wandb(results, records, {"task": args.task, "predictions": args.predictions})
    print_written(args.out)
    return results


def cmd_compare(args) -> str:
    results_a, records_a = read_run(args.dir_a)
    results_b, records_b = read_run(args.dir_b)
    if results_a["task"] != results_b["task"]:
        raise ValueError(f"cannot compare task {results_a['task']!r} with {results_b['task']!r}")
    diff = compare_records(records_a, records_b, level=args.ci_level)
    lenient_diff = None
    if has_lenient(records_a) and has_lenient(records_b):
        lenient_diff = compare_records(records_a, records_b, level=args.ci_level, key="lenient_correct")
    text = compare_markdown(args.dir_a, results_a, args.dir_b, results_b, diff, lenient_diff)
    print(text)
    return text


def cmd_passk(args) -> str:
    if len(set(args.dirs)) != len(args.dirs):
        raise ValueError("a folder is named twice: pass each folder once")
    runs = {folder: read_run(folder) for folder in args.dirs}
    check_same_problems(runs)
    records = {folder: run_records for folder, (_, run_records) in runs.items()}
    largest = max(samples_per_problem(r) for r in records.values())
    if args.ks and args.ks[-1] > largest:
        raise ValueError(
            f"--ks {args.ks[-1]}: the folders hold at most {largest} samples per problem, so pass@k stops at "
            f"k = {largest}: drop the larger k or sample more (eval run --num-samples)"
        )
    text = passk_markdown(records, args.ks, args.ci_level)
    if args.png:
        task = runs[args.dirs[0]][0].get("task")
        plot_pass_at_k(records, args.png, title=f"{task}: pass@k, {len(records[args.dirs[0]])} problems")
    print(text)
    return text


def cmd_merge(args) -> list[str]:
    # Everything is checked before the base model loads (its config alone is read, for the shapes).
    base = check_merge(args.adapter, args.base, args.out, args.dtype, args.overwrite)
    check_adapter(args.adapter, base, args.ignore_adapter_base, model_flag="--base")
    written = merge_adapter(args.adapter, base, args.out, args.dtype)
    print(f"wrote {args.out}: {base} with {args.adapter} merged into its weights ({', '.join(written)})")
    print(f"evaluate it with: python -m eval run --model {args.out} --task TASK --out DIR (--backend vllm on a GPU)")
    return written


def cmd_forgetting(args) -> dict:
    # Everything that can be wrong is checked here, before the models load.
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size}: pass 1 or more documents per forward pass")
    values = read_reference(args.data, args.field, args.limit)
    check_model_source(args.base, "--base")
    check_model_source(args.model, "--model", files=("config.json", "adapter_config.json"))
    adapter = args.model if (Path(args.model) / "adapter_config.json").exists() else None
    same = not adapter and Path(args.model).resolve() == Path(args.base).resolve()
    if adapter:
        check_adapter(adapter, args.base, args.ignore_adapter_base, adapter_flag="--model", model_flag="--base")
    from transformers import AutoTokenizer  # seconds: `eval passk` and --help need none

    tokenizer = AutoTokenizer.from_pretrained(args.base)
    if not adapter and not same:
        check_same_vocabulary(args.base, args.model, tokenizer)
    documents, n_truncated = encode_documents(tokenizer, values, args.max_length)

    base, _ = load_model(args.base, None, "float32", "hf")
    if same:
        model = base  # one forward pass a batch: KL and the change are exactly 0
    else:
        model, _ = load_model(args.base if adapter else args.model, adapter, "float32", "hf")
    scores = document_scores(base.eval(), model.eval(), documents, args.batch_size)
    settings = {"base": args.base, "model": args.model, "adapter": adapter is not None, "data": args.data}
    settings |= {"field": args.field, "limit": args.limit, "max_length": args.max_length, "n_truncated": n_truncated}
    result = {**settings, **summarize_forgetting(scores, args.ci_level), "documents": scores}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / FORGETTING_FILE).write_text(json.dumps(result, indent=2) + "\n")
    print(forgetting_lines(result))
    print(f"written to {out / FORGETTING_FILE}")
    return result


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = make_parser().parse_args(argv)
    try:
        commands = {
            "run": cmd_run,
            "score": cmd_score,
            "compare": cmd_compare,
            "passk": cmd_passk,
            "forgetting": cmd_forgetting,
            "merge": cmd_merge,
        }
        commands[args.command](args)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
