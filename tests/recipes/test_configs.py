"""Every config under recipes/configs (recursively; a base, ``_*.yaml``, through the configs that name it) resolves to
the recipe its file-name prefix names (``cpu_lab.runner.recipe_for``, the map every lab launches through), parses with
that recipe through its own checks and names only known rewards; GRPO configs also pass the recipe's pre-model checks
and carry their exact launch command.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_configs.py

GPU configs set ``bf16: true``, which TRL refuses on a machine without a GPU; they are parsed with ``--use_cpu true``
added (bf16 then autocasts), the only override. Configs that report to W&B are parsed with ``WANDB_MODE=offline``,
under which the recipes' W&B check needs no login.
"""

import importlib.util
from pathlib import Path

import pytest

from cpu_lab import runner
from recipes import checks, grpo_setup
from recipes.parser import load_config, recipe_configs
from rewards import get_reward

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = recipe_configs(ROOT / "recipes" / "configs")  # every config a recipe runs (the bases, _*.yaml, aside)
MATRIX_KEYS = {"loss_type", "beta", "scale_rewards", "output_dir"}  # what may differ inside the GSM8K matrix


def parse(path: Path):
    """(recipe module, parsed arguments) as the labs' runner parses ``path``: a recipe module that does not exist
    raises here, which fails the test (never a skip)."""
    module = runner.recipe_module(path)
    fields = {f for dataclass_type in module.make_parser().dataclass_types for f in dataclass_type.__dataclass_fields__}
    return runner.parse(path, ["--use_cpu", "true"] if "use_cpu" in fields else [])


@pytest.fixture(autouse=True)
def wandb_offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")


def test_configs_exist():
    names = {p.relative_to(ROOT / "recipes" / "configs").as_posix() for p in CONFIGS}
    for model in ("qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct"):
        for variant in ("grpo_lora_b0.04", "grpo_lora_b0", "grpo_lora_drgrpo_b0.04", "grpo_lora_drgrpo_b0"):
            assert f"gsm8k/{model}/{variant}.yaml" in names
    assert "tiny/grpo_cpu.yaml" in names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "recipes" / "configs").as_posix())
def test_config_parses_with_its_recipe_and_names_known_rewards(path):
    assert importlib.util.find_spec(runner.recipe_for(path)) is not None  # the recipe its file name names exists
    module, parsed = parse(path)
    for args in parsed:
        for name in getattr(args, "reward_funcs", None) or []:
            get_reward(name)  # raises for an unknown name
    model_args = next(a for a in parsed if hasattr(a, "use_peft"))
    checks.check_precision(model_args.use_peft, model_args.dtype, deepspeed=False)  # float32 master weights
    if module.__name__ == "recipes.grpo":  # judge_lab_ configs too: a judge-lab config is a GRPO config
        grpo_setup.check_args(*parsed[:3])  # the recipe's checks that run before any model load
        relative = path.relative_to(ROOT).as_posix()
        assert f"python -m recipes.grpo --config {relative}" in path.read_text(), "header must give the exact command"


def test_every_prefix_names_a_recipe_that_exists():
    for prefix, name in runner.RECIPES.items():
        module = importlib.import_module(name)
        assert callable(module.make_parser) and callable(module.main), prefix
    assert runner.recipe_for("recipes/configs/judge_lab/tiny/judge_lab_tiny_judge_b0.04.yaml") == "recipes.grpo"


def test_a_config_whose_recipe_is_missing_fails_with_the_map_named(monkeypatch):
    # what a prefix mapped to a removed module does to the parse test above: an error, not a skip
    monkeypatch.setitem(runner.RECIPES, "grpo_", "recipes.no_such_recipe")
    with pytest.raises(ModuleNotFoundError, match=r"names the recipe recipes\.no_such_recipe, which does not exist"):
        parse(ROOT / "recipes" / "configs" / "tiny" / "grpo_cpu.yaml")


@pytest.mark.parametrize("model", ["qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct"])
def test_gsm8k_matrix_differs_only_in_loss_and_beta(model):
    folder = ROOT / "recipes" / "configs" / "gsm8k" / model
    runs = {
        name: load_config(folder / f"{name}.yaml")
        for name in (
            "grpo_lora_b0.04",
            "grpo_lora_b0",
            "grpo_lora_drgrpo_b0.04",
            "grpo_lora_drgrpo_b0",
            "grpo_lora_dapo_b0",
        )
    }
    reference = runs["grpo_lora_b0.04"]
    for name, config in runs.items():
        differing = {k for k in reference.keys() | config.keys() if reference.get(k) != config.get(k)}
        assert differing <= MATRIX_KEYS, f"{name} differs in {differing - MATRIX_KEYS}"
        assert config["seed"] == reference["seed"] and "data_seed" in config  # same seed and data order
        expected = {"drgrpo": ("dr_grpo", "none"), "dapo": ("dapo", "group")}.get(name.split("_")[2], ("grpo", "group"))
        assert (config["loss_type"], config["scale_rewards"]) == expected
        assert config["beta"] == (0.04 if name.endswith("b0.04") else 0)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "recipes" / "configs").as_posix())
def test_lora_configs_that_sync_vllm_keep_a_float32_base(path):
    """TRL merges the LoRA into the base and unmerges it at every vLLM sync; in bf16 that moved 24.9% of the base
    weights in 400 cycles (docs/gpu.md, bench/lora_merge_drift.py), so such configs load the base in float32."""
    config = load_config(path)
    syncs_vllm = config.get("use_vllm") or config.get("use_vllm_if_available")
    if config.get("use_peft") and syncs_vllm and not (config.get("load_in_4bit") or config.get("load_in_8bit")):
        assert config.get("dtype") == "float32", f"{path.name}: dtype {config.get('dtype')!r}, use float32 (bf16: true)"
