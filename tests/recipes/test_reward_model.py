"""The Bradley-Terry reward-model recipe (recipes/reward_model.py) and the reward that scores with it.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/recipes/test_reward_model.py -q

Tiny runs: a ~100k-parameter local model, pairs from GSM8K reference solutions (in-memory, no network).
"""

import functools
import json
import logging
import math
import pickle
from pathlib import Path

import pytest
import torch

from eval.jsonl import read_jsonl, write_jsonl
from recipes import dpo, first_loss, grpo, reward_model
from recipes.checks import ConfigError
from recipes.first_loss import REWARD_MODEL_START, FirstLossCheck
from recipes.reward_model import check_bt_loss, main
from rewards import check_reward_weights, get_reward, reward_info
from rewards.reward_model import RewardModelReward, check_reward_model
from tests.helpers import as_flags, parse_recipe_config, write_reference_pairs
from training_data.pairs import split_by_prompt

CONFIG = "recipes/configs/tiny/reward_model_cpu.yaml"


@pytest.fixture(scope="module")
def reference_pairs(data_dir, tmp_path_factory):
    """24 pairs: GSM8K reference solutions (correct) and the same with the final answer + 1 (wrong)."""
    return write_reference_pairs(data_dir, tmp_path_factory.mktemp("rollouts"), limit=24)


# the recipe's config and the given flags, parsed as a run parses them
parse = functools.partial(parse_recipe_config, reward_model, CONFIG, as_run=True)


def run_flags(model_dir, data, out, *extra):
    flags = as_flags(model_name_or_path=model_dir, build_tiny_model=False, data=data, output_dir=out, disable_tqdm=True)
    return (*flags, *extra)


@pytest.fixture(scope="module")
def trained(tiny_model_dir, reference_pairs, tmp_path_factory):
    out = tmp_path_factory.mktemp("rm")
    flags = run_flags(
        tiny_model_dir, reference_pairs, out, "--max_steps", "6", "--eval_steps", "3", "--max_length", "1024"
    )  # every GSM8K pair fits: none dropped
    return main(*parse(*flags)), out


def test_tiny_run_checks_the_loss_and_reports_heldout_accuracy(trained, tiny_model_dir):
    report, out = trained
    assert abs(report["bt_loss_check"]["difference_1"] - 0.3132617) < 1e-5  # -log sigmoid(1)
    assert abs(report["bt_loss_check"]["tie"] - math.log(2)) < 1e-6
    assert report["new_head"] and report["first_loss_ok"] is True  # zero head: every pair tied at step 1
    assert abs(report["first_loss"] - math.log(2)) < 1e-4
    log = read_jsonl(out / "log.jsonl")
    assert log[0]["step"] == 1 and log[0]["rm/train_pairwise_accuracy"] == log[0]["accuracy"]
    heldout = [r for r in log if "rm/heldout_pairwise_accuracy" in r]
    assert [r["step"] for r in heldout][:2] == [3, 6]  # during training, under rm/
    assert report["heldout_pairwise_accuracy"] == heldout[-1]["rm/heldout_pairwise_accuracy"]
    assert report["train_pairs"] + report["heldout_pairs"] == report["pairs"] == 24
    from safetensors.torch import load_file

    weights = load_file(out / "model.safetensors")
    assert weights["score.weight"].abs().sum() > 0  # the head started at zero: it was trained and saved
    check_reward_model(out)  # the saved folder is a one-label classifier with a chat template


def test_held_out_prompts_are_not_trained_on(reference_pairs):
    from training_data.pairs import load_preference_dataset

    pairs, _ = load_preference_dataset(reference_pairs)
    train, heldout = split_by_prompt(pairs, 0.25, seed=0)
    train_prompts = {json.dumps(p) for p in train["prompt"]}
    assert len(heldout) == 6 and not any(json.dumps(p) in train_prompts for p in heldout["prompt"])


def test_margin_shifts_the_first_loss(tiny_model_dir, reference_pairs, tmp_path):
    report = main(*parse(*run_flags(tiny_model_dir, reference_pairs, tmp_path, "--max_steps", "1", "--margin", "1")))
    assert abs(report["first_loss"] - math.log1p(math.e)) < 1e-4 and report["first_loss_ok"]  # -log sigmoid(-1)
    assert abs(report["bt_loss_check"]["difference_1"] - math.log(2)) < 1e-6  # difference 1 - margin 1 = a tie


class _Trainer:
    """Just what check_bt_loss reads: a loss, args, metrics."""

    def __init__(self, loss):
        self.compute_loss, self._metrics, self._total_train_tokens = loss, {"train": {}}, 0
        self.args = type("Args", (), {"center_rewards_coefficient": None})()


@pytest.mark.heavy  # builds a model
def test_bt_check_fails_on_a_loss_that_is_not_bradley_terry():
    def hinge(model, inputs):  # max(0, 1 - (r_c - r_r)): 0 at difference 1, not 0.3133
        chosen, rejected = model(**inputs).logits.squeeze(-1).chunk(2)
        return torch.relu(1 - (chosen - rejected)).mean()

    with pytest.raises(RuntimeError, match="not Bradley-Terry"):
        check_bt_loss(_Trainer(hinge), None)

    def bt(model, inputs):
        chosen, rejected = model(**inputs).logits.squeeze(-1).chunk(2)
        return -torch.nn.functional.logsigmoid(chosen - rejected).mean()

    assert abs(check_bt_loss(_Trainer(bt), None)["difference_1"] - 0.3132617) < 1e-5


def test_first_loss_check_flags_a_nonzero_start(caplog):
    state = type("S", (), {"global_step": 1})()
    ok = FirstLossCheck(math.log(2), "log(1 + e^0)", 1e-4, REWARD_MODEL_START)
    with caplog.at_level(logging.INFO, logger="recipes.first_loss"):
        ok.on_log(None, state, None, logs={"loss": 0.693147, "min_reward": 0.0, "max_reward": 0.0})
    bad = FirstLossCheck(math.log(2), "log(1 + e^0)", 1e-4, REWARD_MODEL_START)
    with caplog.at_level(logging.WARNING, logger="recipes.first_loss"):
        bad.on_log(None, state, None, logs={"loss": 0.693147, "min_reward": -0.2, "max_reward": 0.3})
    assert ok.ok is True and bad.ok is False
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "first reward-model loss 0.693147 = log(1 + e^0): every pair starts tied"
    assert (
        "REWARD MODEL FIRST LOSS IS NOT A TIE: min_reward = -0.200000, not 0; max_reward = 0.300000, not 0." in said[1]
    )
    assert "The score head was not zero" in said[1]


def test_both_recipes_use_the_one_first_loss_check():
    # one class in recipes/first_loss.py: a copy in a recipe (the drift this replaced) fails here
    for recipe in (dpo, reward_model):
        source = Path(recipe.__file__).read_text()
        assert "from recipes.first_loss import" in source and "class FirstLossCheck" not in source
    assert first_loss.FirstLossCheck.__module__ == "recipes.first_loss"


def test_a_run_started_again_resumes_from_its_last_checkpoint(tiny_model_dir, reference_pairs, tmp_path, capsys):
    no_eval = ("--eval_strategy", "no")
    every_step = ("--save_strategy", "steps", "--save_steps", "1")  # a checkpoint after each step
    main(*parse(*run_flags(tiny_model_dir, reference_pairs, tmp_path, "--max_steps", "2", *no_eval, *every_step)))
    assert (tmp_path / "checkpoint-2").is_dir()
    report = main(*parse(*run_flags(tiny_model_dir, reference_pairs, tmp_path, "--max_steps", "3", *no_eval)))
    assert f"resuming from {tmp_path / 'checkpoint-2'}" in capsys.readouterr().out
    train_steps = [r["step"] for r in read_jsonl(tmp_path / "log.jsonl") if "loss" in r]
    assert train_steps == [1, 2, 3]  # step 3 only, appended to the first run's log
    assert report["first_loss_ok"] is None  # resumed: the head is no longer zero, not judged


def test_only_the_main_process_writes(tiny_model_dir, reference_pairs, tmp_path, monkeypatch):
    # a second process of `accelerate launch` trains like the main one and writes none of the run's files
    from trl import RewardConfig

    monkeypatch.setattr(RewardConfig, "process_index", property(lambda self: 1))  # what run_setup reads
    report = main(*parse(*run_flags(tiny_model_dir, reference_pairs, tmp_path, "--max_steps", "1")))
    assert report["heldout_pairwise_accuracy"] is not None  # it trained and evaluated ...
    written = {p.name for p in tmp_path.iterdir()}
    assert not written & {"report.json", "resolved_config.json", "log.jsonl", "model.safetensors"}, written


def _write(path, rows):
    return str(write_jsonl(rows, path))


@pytest.fixture
def no_model_load(monkeypatch):
    """Any attempt to load weights fails the test: bad input must be refused before."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(transformers.AutoModelForSequenceClassification, "from_pretrained", refuse)


PROMPT = [{"role": "user", "content": "1+1?"}]
BAD_INPUTS = [
    # pairs without a rejected column
    ([{"prompt": PROMPT, "chosen": [{"role": "assistant", "content": "#### 2"}]}], (), "no ['rejected'] column"),
    # chosen equal to rejected
    (
        [
            {
                "prompt": PROMPT,
                "chosen": [{"role": "assistant", "content": "#### 2"}],
                "rejected": [{"role": "assistant", "content": "#### 2"}],
            }
        ],
        (),
        "chosen == rejected",
    ),
    # a model folder that does not exist
    (None, ("--model_name_or_path", "runs/no/such/model"), "does not exist"),
]


@pytest.mark.parametrize("rows, flags, message", BAD_INPUTS)
def test_bad_input_is_refused_before_a_model_loads(tiny_model_dir, tmp_path, no_model_load, rows, flags, message):
    data = _write(tmp_path / "pairs.jsonl", rows or [])
    args = parse(*run_flags(tiny_model_dir, data, tmp_path / "out"), *flags)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        main(*args)


def test_tokenizer_without_chat_template_is_refused(tiny_model_dir, reference_pairs, tmp_path, no_model_load):
    import shutil

    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="has no chat template"):
        main(*parse(*run_flags(model, reference_pairs, tmp_path / "out")))
    with pytest.raises(ValueError, match="has no chat template"):
        check_reward_model_with_head(model)


def check_reward_model_with_head(model):
    """A causal-LM folder relabelled as a classifier, so only the tokenizer can fail."""
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["Qwen2ForSequenceClassification"]
    (model / "config.json").write_text(json.dumps(config))
    check_reward_model(model)


def test_reward_model_path_must_be_a_sequence_classifier(tiny_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist: train one"):
        RewardModelReward(tmp_path / "missing").load()
    with pytest.raises(ValueError, match="not a sequence classifier"):
        RewardModelReward(tiny_model_dir).load()  # a causal LM


def test_reward_scores_like_trl_batched_truncated_and_logs_rm_keys(trained):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl.data_utils import apply_chat_template

    _, out = trained
    prompts = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(5)]
    lead = ["so " * (3 * (4 - i)) for i in range(5)]  # longest first: batched by length, returned in this order
    completions = [
        [{"role": "assistant", "content": f"{lead[i]}{i} + 1 = {i + 1}\n#### {i + 1 + (i % 2)}"}] for i in range(5)
    ]
    logged = {}
    reward = RewardModelReward(out, batch_size=2)
    scores = reward(prompts, completions, answer=[str(i + 1) for i in range(5)], log_metric=logged.__setitem__)
    # TRL's GRPOTrainer path for a model reward: chat template, one padded batch, logits[:, 0]
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    pairs = zip(prompts, completions, strict=True)
    texts = [apply_chat_template({"messages": p + c}, tokenizer)["text"] for p, c in pairs]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        expected = model(**inputs).logits[:, 0].tolist()
    assert scores == pytest.approx(expected, abs=1e-5)
    assert logged["rm/proxy_reward"] == pytest.approx(sum(scores) / 5)
    assert logged["rm/true_accuracy"] == pytest.approx(3 / 5) and logged["rm/truncated_frac"] == 0  # i = 0, 2, 4
    short = RewardModelReward(out, max_length=8)
    cut = short(prompts[:1], completions[:1], log_metric=logged.__setitem__)
    ids = tokenizer(texts[:1], add_special_tokens=False)["input_ids"][0][-8:]  # the END is kept
    with torch.inference_mode():
        assert cut[0] == pytest.approx(model(input_ids=torch.tensor([ids])).logits[0, 0].item(), abs=1e-5)
    assert logged["rm/truncated_frac"] == 1.0
    assert pickle.loads(pickle.dumps(reward)).model is None  # picklable: reloads where it is used


def test_registered_and_checked_as_an_unbounded_learned_score(caplog):
    assert reward_info("reward_model").kind == "learned"
    assert get_reward("reward_model").__name__ == "reward_model_reward"
    with pytest.raises(ValueError, match="learned score with no bound"):
        check_reward_weights(["reward_model"])  # no checker beside it: an RLHF run needs reward_check: warn
    with caplog.at_level(logging.WARNING):
        check_reward_weights(["reward_model"], on_violation="warn")
        check_reward_weights(["gsm8k_correctness", "reward_model"], [1.0, 0.5])  # bounded terms fine: accepted
    assert "REWARD HACK RISK" in caplog.text and "only the bounded terms are checked" in caplog.text
    with pytest.raises(ValueError, match="can pay a wrong answer"):  # the bounded terms are still checked
        check_reward_weights(["gsm8k_correctness", "gsm8k_format", "reward_model"], [1.0, 20.0, 1.0])


class LengthLover(RewardModelReward):
    """A stand-in reward model that pays characters, and 100 for ending in the gold 8: the probes must catch it paying
    padding."""

    def score(self, prompts, completions):
        assert all(p[0]["content"].endswith("End with #### and the number.") for p in prompts)  # the instruction
        return [len(c) + 100.0 * c.endswith("#### 8") for c in completions], 0.0


def test_probe_column_normalises_against_the_models_own_genuine_answers():
    from eval.probe_matrix import format_matrix, reward_model_scores

    problems = [{"question": "Tom has 3 apples and buys 5 more. How many now?", "answer": "8"}]
    scores = reward_model_scores(LengthLover(), "gsm8k", problems, "End with #### and the number.")
    assert scores["genuine_correct"]["score"] == 1.0 and scores["genuine_wrong"]["score"] == 0.0
    assert scores["genuine_correct"]["raw"] == 100 + len(
        "Let me solve this step by step.\nFirst I write down the quantities given in the problem and what is asked.\n"
        "Then I combine them one operation at a time, checking each intermediate result.\n"
        "Putting it all together, the result is 8.\n#### 8"
    )
    assert scores["padded_wrong"]["violation"] and scores["padded_wrong"]["score"] > 10  # pays length
    assert not scores["bare_wrong"]["violation"]  # '#### 9' is short: paid less than a worked wrong answer
    matrix = {
        "gsm8k": {"reward_model": {"rewards": ["reward_model"], "weights": [1.0], "n_problems": 1, "scores": scores}}
    }
    assert "1.000" in format_matrix(matrix) and "!" in format_matrix(matrix)


def test_grpo_recipe_uses_the_reward_model_by_name(trained, tiny_model_dir, data_dir, tmp_path, monkeypatch):
    """reward_funcs: [gsm8k_correctness, reward_model] in the GRPO recipe, the folder given as reward_model_path:
    scored, logged under rm/, monitored."""
    _, rm = trained
    monkeypatch.delenv("LEASH_REWARD_MODEL", raising=False)  # the recipe's option, not the environment
    args = [
        "--model_name_or_path",
        str(tiny_model_dir),
        "--output_dir",
        str(tmp_path),
        "--data",
        str(data_dir / "gsm8k" / "train.jsonl"),
        "--reward_funcs",
        "gsm8k_correctness",
        "reward_model",
        "--reward_weights",
        "1.0",
        "0.5",
        "--max_steps",
        "1",
        "--logging_steps",
        "1",
        "--eval_limit",
        "0",
        "--monitor_eval_steps",
        "0",
        "--probe_problems",
        "1",
        "--max_completion_length",
        "8",
        "--build_tiny_model",
        "false",
        "--reward_model_path",
        str(rm),
    ]
    grpo.main(*parse_recipe_config(grpo, "recipes/configs/tiny/grpo_cpu.yaml", *args))
    log = read_jsonl(tmp_path / "log.jsonl")
    step = next(r for r in log if "rewards/reward_model_reward/mean" in r)
    assert step["rm/proxy_reward"] == pytest.approx(step["rewards/reward_model_reward/mean"], abs=1e-5)
    assert "rm/true_accuracy" in step and "monitor/reward_correctness_gap" in step
    probes = json.loads((tmp_path / "probes.json").read_text())
    assert probes  # the monitor's hack probes were scored with the reward model in the set


def test_lora_run_saves_a_plain_classifier_with_its_trained_head(tiny_model_dir, reference_pairs, tmp_path):
    from safetensors.torch import load_file

    flags = run_flags(
        tiny_model_dir,
        reference_pairs,
        tmp_path,
        "--max_steps",
        "2",
        "--use_peft",
        "true",
        "--lora_r",
        "4",
        "--max_length",
        "1024",
    )
    report = main(*parse(*flags))
    assert report["first_loss_ok"] is True  # peft copies the zero head (modules_to_save): still a tie at step 1
    weights = load_file(tmp_path / "model.safetensors")
    assert not any("lora" in k for k in weights)  # merged: the reward loads it as a plain sequence classifier
    assert weights["score.weight"].abs().sum() > 0  # the head was trained with the adapters
    check_reward_model(tmp_path)
    assert len(RewardModelReward(tmp_path)([PROMPT], ["#### 2"])) == 1


def test_true_accuracy_uses_the_math_checker_when_asked(trained, monkeypatch):
    logged = {}
    completions = ["so \\boxed{\\frac{2}{4}}", "#### 0.5"]  # right in MATH style; a GSM8K marker a MATH checker ignores
    monkeypatch.setenv("LEASH_REWARD_MODEL_ANSWER_STYLE", "math")
    RewardModelReward(trained[1])([PROMPT] * 2, completions, answer=["\\frac{1}{2}"] * 2, log_metric=logged.__setitem__)
    assert logged["rm/true_accuracy"] == 0.5
    monkeypatch.setenv("LEASH_REWARD_MODEL_ANSWER_STYLE", "gsm8k")
    RewardModelReward(trained[1])([PROMPT] * 2, completions, answer=["0.5"] * 2, log_metric=logged.__setitem__)
    assert logged["rm/true_accuracy"] == 0.5  # now only '#### 0.5' counts


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "reward reward_model needs reward_model_path"),  # neither the option nor LEASH_REWARD_MODEL
        (["--reward_model_path", "runs/no/such/rm"], "reward model runs/no/such/rm does not exist"),
    ],
)
def test_grpo_refuses_a_reward_model_it_cannot_score_before_the_policy_loads(flags, message, tmp_path, monkeypatch):
    monkeypatch.delenv("LEASH_REWARD_MODEL", raising=False)
    args = ["--model_name_or_path", str(tmp_path / "no_model")]
    args += ["--output_dir", str(tmp_path / "o"), "--build_tiny_model", "false", "--reward_check", "warn"]
    args += ["--reward_funcs", "reward_model", "--reward_weights", "1.0", *flags]
    with pytest.raises(ConfigError, match=message):  # before the missing policy model is looked at
        grpo.main(*parse_recipe_config(grpo, "recipes/configs/tiny/grpo_cpu.yaml", *args))
