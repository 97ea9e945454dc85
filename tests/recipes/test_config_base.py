"""A config's ``base:`` (``recipes.parser.load_config``): every shipped config resolves to the settings recorded in
``tests/data/config_settings.json``, and a ``base:`` that cannot be followed is one line naming the file and the fix.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/recipes/test_config_base.py

``config_settings.json`` holds, for every config under ``recipes/configs/`` (the bases, ``_*.yaml``, aside), the options
it resolves to. A new config is added to it, and a changed one changed in it, in the same commit: a config rewritten on
other bases must resolve to the same options.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipes.parser import (
    RecipeParser,
    config_sources,
    is_base_config,
    load_config,
    parser_from_table,
    recipe_configs,
    shipped_table_path,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = recipe_configs(ROOT / "recipes" / "configs")
GOLDEN = json.loads((ROOT / "tests" / "data" / "config_settings.json").read_text())


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT / "recipes" / "configs").as_posix())
def test_every_config_resolves_to_its_recorded_settings(path):
    assert load_config(path) == GOLDEN[name(path)]


def test_the_recorded_settings_cover_every_config_and_only_them():
    assert sorted(GOLDEN) == [name(p) for p in CONFIGS], (
        "add a new config's settings to tests/data/config_settings.json"
    )


def test_every_base_is_the_base_of_a_config():
    bases = sorted(p for p in (ROOT / "recipes" / "configs").rglob("*.y*ml") if is_base_config(p))
    used = {Path(source).resolve() for config in CONFIGS for source in config_sources(config)[1].values()}
    assert [b for b in bases if b.resolve() not in used] == []


def test_a_config_reads_as_pyyaml_reads_it(tmp_path):
    # read with libyaml's loader where it is installed: every spelling means what PyYAML's own loader says it does
    import yaml

    text = (
        "learning_rate: 1e-5\nwarmup_ratio: 1.0e-1\nbf16: yes\nuse_vllm: off\nseed: 0o17\nrun_name: 2026-12-07\n"
        "report_to: ~\nsystem_prompt: |\n  Solve it.\n  Then answer.\nreward_funcs: &r [a, b]\nreward_check: *r\n"
        "weights: {x: .5, y: -.inf}\nname: 'it''s'\n"
    )
    path = write(tmp_path, text)
    assert load_config(path) == yaml.safe_load(text) and load_config(path)["learning_rate"] == "1e-5"


def write(folder: Path, text: str, filename: str = "grpo_x.yaml") -> Path:
    path = folder / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_variant_replaces_its_bases_keys_and_adds_its_own(tmp_path):
    write(tmp_path, "seed: 0\nbeta: 0.3\nreward_funcs: [a, b]\n", "_base.yaml")
    write(tmp_path / "sub", "base: ../_base.yaml\nbeta: 0.0\nmax_steps: 9\n", "middle.yaml")  # relative to its folder
    variant = write(tmp_path / "sub", "base: middle.yaml\nreward_funcs: [c]\n")
    # the chain resolved, lists replaced whole, base gone
    assert load_config(variant) == {"seed": 0, "beta": 0.0, "reward_funcs": ["c"], "max_steps": 9}
    sources = config_sources(variant)[1]
    assert sources["seed"] == str(tmp_path / "_base.yaml") and sources["reward_funcs"] == str(variant)
    assert sources["beta"] == str(tmp_path / "sub" / "middle.yaml")


def test_a_base_that_names_no_file_is_one_line_with_the_fix(tmp_path):
    variant = write(tmp_path, "base: grpo_gone.yaml\nseed: 1\n")
    with pytest.raises(ValueError, match="names no file") as error:
        load_config(variant)
    message = str(error.value)
    assert str(variant) in message and str(tmp_path / "grpo_gone.yaml") in message and "\n" not in message
    assert "give the path of a config relative to" in message


def test_a_cycle_of_bases_is_one_line_naming_the_chain(tmp_path):
    first = write(tmp_path, "base: grpo_b.yaml\nseed: 1\n", "grpo_a.yaml")
    write(tmp_path, "base: grpo_a.yaml\nbeta: 0.0\n", "grpo_b.yaml")
    with pytest.raises(ValueError, match="makes a cycle") as error:
        load_config(first)
    message = str(error.value)
    assert (
        f"{first} -> {tmp_path / 'grpo_b.yaml'} -> {first}" in message and "remove one of these base: lines" in message
    )
    assert "\n" not in message
    itself = write(tmp_path, "base: grpo_self.yaml\n", "grpo_self.yaml")
    with pytest.raises(ValueError, match="makes a cycle"):
        load_config(itself)


@pytest.mark.parametrize("text", ["- seed: 1\n", "just words\n"])
def test_a_base_that_is_not_a_mapping_is_one_line_naming_both_files(tmp_path, text):
    write(tmp_path, text, "_base.yaml")
    variant = write(tmp_path, "base: _base.yaml\nseed: 1\n")
    with pytest.raises(ValueError, match="not option: value lines") as error:
        load_config(variant)
    message = str(error.value)
    assert (
        str(variant) in message
        and str(tmp_path / "_base.yaml") in message
        and "point base: at a config file" in message
    )


@pytest.mark.parametrize("value", ["[a.yaml, b.yaml]", "3", "''", ""])
def test_a_base_that_is_not_a_path_is_one_line(tmp_path, value):
    variant = write(tmp_path, f"base: {value}\nseed: 1\n")
    with pytest.raises(ValueError, match="base: must name a config file by its path relative to") as error:
        load_config(variant)
    assert str(variant) in str(error.value)


def test_a_malformed_base_names_the_base_and_its_config(tmp_path):
    base = write(tmp_path, "seed: [1\n", "_base.yaml")
    variant = write(tmp_path, "base: _base.yaml\n")
    with pytest.raises(ValueError, match="is not valid YAML") as error:
        load_config(variant)
    assert f"config file {base} (the base of {variant}) is not valid YAML" in str(error.value)


def sft_parser() -> RecipeParser:
    """The SFT recipe's parser, from the table leash ships (no TRL: the config keys are checked the same way)."""
    return parser_from_table(json.loads(shipped_table_path("recipes.sft").read_text())["table"])


def test_an_unknown_or_unreadable_key_of_a_base_is_named_with_the_base(tmp_path):
    base = write(tmp_path, "seed: 0\nlearnig_rate: 1.0e-5\n", "_base.yaml")
    variant = write(tmp_path, "base: _base.yaml\nmax_steps: 2\nlearning_rate: 1.0e-5\n", "sft_x.yaml")
    with pytest.raises(ValueError, match="unknown option learnig_rate") as error:
        sft_parser().parse_args_and_config(["--config", str(variant)])
    assert f"in {base}:" in str(error.value) and "did you mean learning_rate?" in str(error.value)
    base.write_text("seed: 0\nmax_steps: two\n")
    variant.write_text("base: _base.yaml\nlearning_rate: 1.0e-5\n")
    with pytest.raises(ValueError, match="max_steps: 'two' in ") as error:
        sft_parser().parse_args_and_config(["--config", str(variant)])
    assert f"in {base} " in str(error.value)


def test_base_is_not_an_option(tmp_path):
    write(tmp_path, "seed: 3\nmax_steps: 5\n", "_base.yaml")
    variant = write(tmp_path, "base: _base.yaml\nmax_steps: 2\n", "sft_x.yaml")
    script, training, model = sft_parser().parse_args_and_config(["--config", str(variant), "--output_dir", "x"])
    assert (training.seed, training.max_steps) == (3, 2)
    assert not any(hasattr(part, "base") for part in (script, training, model))
