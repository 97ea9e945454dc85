"""The lab's SFT warm start, shrunk to seconds: it is the SFT recipe run on its config
(recipes/configs/lab/sft_lab_warmstart.yaml), stops on a VALIDATION threshold (the held-out set is read before
training and after the stop, never in between), and a second call with the same settings reuses the cached folder.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/cpu_lab/test_cpu_lab_warmstart.py
"""

import json
from pathlib import Path

import pytest

from cpu_lab import warmstart
from cpu_lab.problems import Difficulty, dev_problems, heldout_problems, train_problems
from cpu_lab.warmstart import SFT_CONFIG, WarmStartSettings, lab_tokenizer, sft_flags, warm_start, write_inputs
from eval.jsonl import read_jsonl
from recipes import sft
from recipes.tiny_model import build_model
from tests.helpers import parse_recipe_config

# A model and run small enough for a unit test; the lab's real settings are WarmStartSettings() defaults.
TINY = dict(
    vocab_size=300,  # small: the byte alphabet, special tokens and a few merges
    hidden_size=32,
    num_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=64,
    n_train=64,
    batch_size=8,
    learning_rate=1e-2,  # large: three steps must visibly move the weights
    warmup_steps=0,
    max_new_tokens=8,
)


@pytest.mark.heavy  # builds a model
def test_few_sft_steps_train_save_and_cache(tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cpu_lab import matrix

    settings = WarmStartSettings(**TINY, max_steps=3, eval_every=3, validation_n=5, heldout_n=4, stop_at_accuracy=1.0)
    out = warm_start(settings, tmp_path)  # the recipe's real greedy evaluations through eval.run.evaluate
    record = json.loads((out / "warmstart.json").read_text())
    assert out.name == f"warmstart-{settings.key()}"
    assert record["steps"] == 3 and [c["step"] for c in record["curve"]] == [3]
    assert not record["reached_threshold"]  # a 3-step model does not solve everything
    assert 0.0 <= record["validation_accuracy"] <= 1.0 and 0.0 <= record["heldout_accuracy"] <= 1.0
    read = lambda name: read_jsonl(out / "inputs" / name)  # noqa: E731
    assert read("validation.jsonl") == dev_problems(settings.difficulty, 5, test_n=4)
    assert read("heldout.jsonl") == heldout_problems(settings.difficulty, 4)
    assert read("train.jsonl") == train_problems(64, 0, settings.difficulty, 4, 5)
    # it ran through recipes.sft on the lab's config: the recipe's report and resolved config, with the settings
    resolved = json.loads((out / "resolved_config.json").read_text())
    assert resolved["per_device_train_batch_size"] == 8 and resolved["adam_beta2"] == 0.98 and not resolved["bf16"]
    report = json.loads((out / "report.json").read_text())
    assert report["validation"]["checks"][0]["accuracy"] == record["validation_accuracy"]
    assert report["after"]["accuracy"] == record["heldout_accuracy"] and report["after"]["n"] == 4
    assert read_jsonl(out / "validation.jsonl")[0]["step"] == 3  # the recipe's validation checks
    assert not (out / "inputs" / "init").exists()  # the untrained model is not kept
    trained = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == warmstart.LAB_CHAT_TEMPLATE
    shape = ("hidden_size", "num_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
    initial = build_model(tokenizer, seed=0, **{name: TINY[name] for name in shape})  # the run's model before step 1
    assert record["params"] == initial.num_parameters()
    assert not torch.equal(trained.model.embed_tokens.weight, initial.model.embed_tokens.weight)

    monkeypatch.setattr(matrix, "run_one", lambda *a: pytest.fail("the cached warm start was trained again"))
    assert warm_start(settings, tmp_path) == out  # reused from the cache: no training, no evaluation


@pytest.mark.heavy  # builds a model
def test_stops_on_validation_and_reads_heldout_only_before_and_after(tmp_path, monkeypatch):
    # validation checks at steps 1, 2, 3...: the threshold 0.4 is crossed at step 2. The held-out set scores 0.95
    # whenever it is read, so a rule that looked at it would stop at step 1.
    from eval import run

    validation = iter([0.1, 0.5, 0.9])
    calls = []

    def evaluate(model, tokenizer, task_name, *, data=None, limit=None, **kwargs):
        calls.append((Path(data).name, limit))
        accuracy = 0.95 if Path(data).name == "heldout.jsonl" else next(validation)
        return {"accuracy": accuracy, "n": limit}

    monkeypatch.setattr(run, "evaluate", evaluate)
    settings = WarmStartSettings(**TINY, max_steps=10, eval_every=1, validation_n=6, heldout_n=4, stop_at_accuracy=0.4)
    out = warm_start(settings, tmp_path)
    record = json.loads((out / "warmstart.json").read_text())
    held_out, checks = ("heldout.jsonl", 4), ("validation.jsonl", 6)
    assert calls == [held_out, checks, checks, held_out]  # before training, two checks, after the stop
    assert record["steps"] == 2 and record["validation_accuracy"] == 0.5 and record["reached_threshold"]
    assert record["heldout_accuracy"] == 0.95
    assert [c["validation_accuracy"] for c in record["curve"]] == [0.1, 0.5]


def test_the_flags_carry_every_setting_onto_the_config():
    # WarmStartSettings() is the config's values; a changed setting reaches the recipe as its flag
    from dataclasses import replace

    default = WarmStartSettings()
    # every mapped setting moved off the config's value: integers by 3, fractions halved
    moved = {
        name: getattr(default, name) + 3 if isinstance(getattr(default, name), int) else getattr(default, name) / 2
        for name in warmstart.RECIPE_FLAGS
    }
    changed = replace(default, **moved)
    inputs = {"model_name_or_path": "m", "data": "t.jsonl", "validation_data": "v.jsonl", "eval_data": "h.jsonl"}
    for settings in (default, changed):
        parsed = parse_recipe_config(sft, SFT_CONFIG, *sft_flags(settings, inputs), "--seed", str(settings.seed))
        args = {k: v for part in parsed for k, v in vars(part).items()}
        for name, flag in warmstart.RECIPE_FLAGS.items():
            assert args[flag] == getattr(settings, name), (name, flag)
        assert {k: args[k] for k in inputs} == inputs
        assert args["logging_steps"] == settings.eval_every


@pytest.mark.heavy  # builds a model
def test_inputs_are_the_untrained_model_and_the_three_splits(tmp_path):
    settings = WarmStartSettings(**TINY, validation_n=5, heldout_n=4)
    inputs = write_inputs(settings, tmp_path)
    assert (inputs["model_name_or_path"] / "model.safetensors").exists()
    questions = {name: {r["question"] for r in read_jsonl(inputs[name])} for name in ("data", "validation_data")}
    questions["eval_data"] = {r["question"] for r in read_jsonl(inputs["eval_data"])}
    assert not questions["data"] & (questions["validation_data"] | questions["eval_data"])
    from datasets import Dataset

    from eval.tasks import get_task

    row = sft.sft_rows(get_task(warmstart.TASK), Dataset.from_list(read_jsonl(inputs["data"])[:1]))[0]
    problem = read_jsonl(inputs["data"])[0]
    assert row["prompt"] == get_task("lab").prompt(problem["question"])  # the prompt the lab configs' eval/GRPO use
    assert row["completion"] == [{"role": "assistant", "content": problem["answer"]}]


def test_cache_key_changes_with_the_configs_other_settings(monkeypatch):
    before = WarmStartSettings().key()
    monkeypatch.setitem(warmstart._SFT, "adam_beta2", 0.999)
    assert WarmStartSettings().key() != before
    monkeypatch.setitem(warmstart._SFT, "adam_beta2", 0.98)
    monkeypatch.setitem(warmstart._SFT, "data", "elsewhere.jsonl")  # a path is set per run: not part of the key
    assert WarmStartSettings().key() == before


def test_lab_configs_prompt_as_the_warm_start_was_trained():
    from cpu_lab.warmstart import TASK
    from recipes.parser import load_config

    configs = sorted((Path(__file__).resolve().parents[2] / "recipes" / "configs" / "lab").glob("grpo_lab_*.yaml"))
    assert configs, "no GRPO lab config found"
    for config in configs:
        values = load_config(config)
        assert (values["task"], values["eval_task"]) == (TASK, TASK), config


def test_lab_prompt_is_short_and_has_no_system_turn():
    # every prompt token is paid for in SFT and in each GRPO step: the lab's template drops Qwen's default system turn
    from eval.tasks import get_task

    tok = lab_tokenizer(WarmStartSettings(difficulty=Difficulty(max_number=20)))
    text = tok.apply_chat_template(
        get_task("lab").prompt("Tom has 3 apples."), tokenize=False, add_generation_prompt=True
    )
    assert (
        text
        == "<|im_start|>user\nTom has 3 apples.\n\nEnd with #### and the number.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tokenizer_keeps_chat_words_whole_and_digits_single():
    tok = lab_tokenizer(WarmStartSettings(difficulty=Difficulty(max_number=20)))
    assert tok.tokenize("assistant") == ["assistant"]
    assert tok.tokenize("123") == ["1", "2", "3"]


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(stop_at_accuracy=0.0), "stop_at_accuracy"),  # a threshold every model meets
        (dict(stop_at_accuracy=1.5), "stop_at_accuracy"),  # a threshold no model meets
        (dict(eval_every=0), "eval_every"),  # never evaluated, never stops
    ],
)
def test_bad_settings_fail_before_any_training(bad, message):
    with pytest.raises(ValueError, match=message):
        WarmStartSettings(**bad)


def test_cache_key_changes_with_the_prompt(monkeypatch):
    # a model warm-started on one instruction must not be reused for another (the cache is keyed by settings+prompt)
    from dataclasses import replace

    from cpu_lab.warmstart import TASK, WarmStartSettings
    from eval import tasks

    before = WarmStartSettings().key()
    monkeypatch.setitem(tasks.TASKS, TASK, replace(tasks.TASKS[TASK], instruction="Write #### then the answer."))
    assert WarmStartSettings().key() != before


@pytest.mark.parametrize("seed_name", ["DEV_SEED", "TEST_SEED"])
def test_cache_key_changes_with_the_splits(monkeypatch, seed_name):
    # a warm start stopped on one validation set (and trained on data that leaves out one pair of sets) must not be
    # reused for another: the splits' seeds are part of the key
    from cpu_lab import problems

    before = WarmStartSettings().key()
    monkeypatch.setattr(problems, seed_name, getattr(problems, seed_name) + 1)
    assert WarmStartSettings().key() != before


def test_cache_key_changes_with_the_validation_size():
    assert WarmStartSettings(validation_n=100).key() != WarmStartSettings().key()


@pytest.mark.heavy  # builds a model
def test_prepared_lab_has_a_dev_set_apart_from_training_that_the_in_training_checks_read(tmp_path):
    """The lab's GRPO runs check themselves during training on dev, not on the held-out set they are reported on, and
    no dev or held-out problem shares its worked solution with a training problem."""
    from cpu_lab.problems import check_disjoint
    from cpu_lab.warmstart import prepare_lab, recipe_flags
    from eval.jsonl import read_jsonl

    settings = WarmStartSettings(**TINY, max_steps=2, eval_every=2, validation_n=20, heldout_n=30, stop_at_accuracy=1.0)
    paths = prepare_lab(settings, tmp_path / "cache", root=tmp_path / "lab")
    assert len(read_jsonl(paths["dev"])) == 20 and len(read_jsonl(paths["heldout"])) == 30
    check_disjoint({"train": paths["train"], "dev": paths["dev"], "test": paths["heldout"]})
    flags = recipe_flags(paths)
    assert flags[flags.index("--monitor_eval_data") + 1] == str(paths["dev"])
    assert flags[flags.index("--eval_data") + 1] == str(paths["heldout"])
