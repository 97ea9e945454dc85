"""Build a tiny local causal LM and tokenizer, so tests, the demo and benchmarks need no download.

A ~100k-parameter ``Qwen2ForCausalLM`` and a byte-level BPE trained on a corpus that includes the chat-template
strings (else "assistant" would be split into characters), one token per digit.

    python -m recipes.tiny_model /tmp/tiny          # writes config, weights and tokenizer to /tmp/tiny
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

# torch, tokenizers and transformers are imported in the builders: --help, and the checks that read may_build_at,
# load none of them.

# Qwen2.5's chat template, reduced to what leash uses (system/user/assistant turns, generation prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_MODEL_DIR = "runs/tiny_model"  # where the tiny configs build it (their model_name_or_path)
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # "org/name" or "name", as the hub names models
# Qwen2's pre-tokenizer regex: single digits, letters runs, punctuation runs, whitespace.
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""  # noqa: E501


def default_corpus() -> list[str]:
    """Text the tokenizer is trained on: chat-template strings, maths markers and a few GSM8K-like sentences."""
    lines = [
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
        "<|im_start|>user\n",
        "<|im_start|>assistant\n",
        "system user assistant",
        "assistant",
        "user",
        "system",  # as they follow <|im_start|>: whole tokens
        "Solve the problem step by step. Put the final answer after ####.",
        "Put your final answer within \\boxed{}.",
        "#### 18",
        "The answer is \\boxed{\\frac{1}{2}}.",
        "Answer: 17",
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
        "How many clips did Natalia sell altogether in April and May?",
        "She has 3 apples and buys 5 more, so she has 3 + 5 = 8 apples.",
        "Weng earns $12 an hour for babysitting. How much did she earn?",
        "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) { } [ ] ^ _ $ % . , : ; ? ! ' \"",
    ]
    return lines * 20


def build_tokenizer(vocab_size: int = 400, corpus: list[str] | None = None, chat_template: str = CHAT_TEMPLATE):
    """A byte-level BPE tokenizer with Qwen-style special tokens and chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus or default_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
        padding_side="left",  # decoder-only generation pads on the left
    )


def build_model(tokenizer, hidden_size: int = 64, num_layers: int = 2, seed: int = 0, **overrides):
    """A randomly initialised Qwen2ForCausalLM sized to the tokenizer (~100k parameters at the defaults)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=overrides.pop("intermediate_size", hidden_size * 3),
        num_hidden_layers=num_layers,
        num_attention_heads=overrides.pop("num_attention_heads", 4),
        num_key_value_heads=overrides.pop("num_key_value_heads", 2),
        max_position_embeddings=overrides.pop("max_position_embeddings", 2048),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **overrides,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def reads_as_hub_id(path: str) -> bool:
    """Whether ``path`` reads as a hub id (``org/name`` or ``name``); a local folder not there yet needs ``./``.

    >>> reads_as_hub_id("Qwen/Qwen2.5-0.5B-Instruct"), reads_as_hub_id("./runs/tiny"), reads_as_hub_id("/tmp/a/b")
    (True, False, False)
    """
    return HUB_ID.fullmatch(path) is not None


def is_tiny_model_dir(path: str) -> bool:
    """Whether ``path`` is the tiny configs' folder (``TINY_MODEL_DIR``, relative to the working folder).

    >>> is_tiny_model_dir("runs/tiny_model/"), is_tiny_model_dir("./runs/tiny_model"), is_tiny_model_dir("runs/x")
    (True, True, False)
    """
    return Path(path).expanduser().resolve() == Path(TINY_MODEL_DIR).resolve()


def may_build_at(path: str, asked_on_command_line: bool, path_on_command_line: bool) -> bool:
    """Whether ``build_tiny_model: true`` may build the random tiny model at the missing folder ``path``.

    Only at ``TINY_MODEL_DIR``, or where the same place set both options, never at a hub id: a typo in a model path
    must not train a random model without a word.

    >>> may_build_at("runs/tiny_model", False, True), may_build_at("Qwen/Qwen2.5-0.5B-Instruct", False, True)
    (True, False)
    >>> may_build_at("./runs/mine", asked_on_command_line=True, path_on_command_line=True)
    True
    >>> may_build_at("/data/my_sft_modle", False, True)
    Traceback (most recent call last):
    ...
    ValueError: model_name_or_path /data/my_sft_modle does not exist, and the config's build_tiny_model: true builds the random tiny model only at runs/tiny_model: pass an existing model folder or a hub id, or add --build_tiny_model true to build a tiny one at /data/my_sft_modle
    """  # noqa: E501
    if is_tiny_model_dir(path):
        return True
    if reads_as_hub_id(path):
        if asked_on_command_line:
            raise ValueError(
                f"--build_tiny_model true would build a random model at {path}, which reads as a hub id (org/name): "
                f"write the folder as ./{path} to build it there, or drop --build_tiny_model to load {path}"
            )
        return False
    if asked_on_command_line or not path_on_command_line:
        return True
    raise ValueError(
        f"model_name_or_path {path} does not exist, and the config's build_tiny_model: true builds the random tiny "
        f"model only at {TINY_MODEL_DIR}: pass an existing model folder or a hub id, or add --build_tiny_model true "
        f"to build a tiny one at {path}"
    )


def save_tiny_model(
    out_dir: str | Path,
    vocab_size: int = 400,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    corpus: list[str] | None = None,
) -> Path:
    """Build, save and return the folder of a tiny model + tokenizer that `from_pretrained` loads."""
    from transformers.utils import logging as transformers_logging

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size, corpus)
    model = build_model(tokenizer, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
    bar = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # one shard of ~100k parameters: a bar says nothing
    try:
        model.save_pretrained(out)
    finally:
        if bar:
            transformers_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    (out / "leash_tiny.json").write_text(json.dumps({"params": model.num_parameters(), "seed": seed}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.tiny_model", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = save_tiny_model(args.out_dir, hidden_size=args.hidden_size, num_layers=args.num_layers, seed=args.seed)
    print(f"tiny model saved to {out} ({json.loads((out / 'leash_tiny.json').read_text())['params']:,} parameters)")


if __name__ == "__main__":
    main()
