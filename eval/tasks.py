"""The benchmarks leash trains and evaluates on: where the data lives, how a prompt looks, what the gold is.

One prompt builder serves the recipes and eval, so a model is evaluated with the prompt it was trained on.
Each task loads from the Hugging Face hub by name (``openai/gsm8k``) or from a local ``.jsonl``/``.json`` file
(``../shared/data/gsm8k/test.jsonl`` here); rows come back with a ``prompt`` (chat messages), an ``answer``
column holding the final answer only (what the rewards compare against), and the original fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rewards.answers import FORMAT_EXAMPLES, gsm8k_gold


@dataclass(frozen=True)
class Task:
    name: str
    answer_style: str  # "gsm8k" (#### N) or "math" (\boxed{}) -- the extractor's `task` argument
    hub_id: str
    hub_config: str | None
    hub_split: str
    question_field: str
    gold_field: str  # the field the final answer is read from
    instruction: str  # appended to the question; asks for the format the rewards check
    local_copy: str = ""  # where a local copy is (relative to the repo root), named when a task has no hub copy

    def gold(self, row: dict) -> str:
        raw = row[self.gold_field]
        return gsm8k_gold(raw) if self.answer_style == "gsm8k" and "####" in str(raw) else str(raw).strip()

    def prompt(self, question: str) -> list[dict]:
        """Chat messages for one question (the chat template is applied by the trainer or the generator)."""
        return [{"role": "user", "content": f"{question.strip()}\n\n{self.instruction}"}]


TASKS: dict[str, Task] = {
    "gsm8k": Task(
        name="gsm8k",
        answer_style="gsm8k",
        hub_id="openai/gsm8k",
        hub_config="main",
        hub_split="test",
        question_field="question",
        gold_field="answer",
        instruction="Solve the problem step by step. At the end, write the final answer as a number on its own "
        f"line after '####', like this:\n{FORMAT_EXAMPLES['gsm8k']}",
        local_copy="../shared/data/gsm8k/test.jsonl",
    ),
    "math500": Task(
        name="math500",
        answer_style="math",
        hub_id="HuggingFaceH4/MATH-500",
        hub_config=None,
        hub_split="test",
        question_field="problem",
        gold_field="answer",
        instruction=f"Solve the problem step by step. Put your final answer within {FORMAT_EXAMPLES['math']}.",
        local_copy="../shared/data/math500/test.jsonl",
    ),
}
# Training sets use the same prompts and answer styles as their benchmark.
TASKS["gsm8k_train"] = Task(
    **{
        **TASKS["gsm8k"].__dict__,
        "name": "gsm8k_train",
        "hub_split": "train",
        "local_copy": "../shared/data/gsm8k/train.jsonl",
    }
)
TASKS["math_train"] = Task(
    **{
        **TASKS["math500"].__dict__,
        "name": "math_train",
        "hub_id": "",
        "hub_split": "train",
        "local_copy": "../shared/data/math_train/train.jsonl",
    }
)
# GSM8K-shaped answers with a short instruction, for generated problems such as the CPU lab's (a tiny model learns the
# format from its SFT data; every prompt token costs compute). No hub copy: the data always comes with --data.
TASKS["lab"] = Task(
    **{
        **TASKS["gsm8k"].__dict__,
        "name": "lab",
        "hub_id": "",
        "instruction": "End with #### and the number.",
        "local_copy": "",
    }
)


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose one of {sorted(TASKS)}")
    return TASKS[name]


def is_local(path_or_hub: str) -> bool:
    """A local file (by suffix, or because it exists); anything else is read as a hub id."""
    return Path(path_or_hub).suffix in (".jsonl", ".json") or Path(path_or_hub).exists()


def load_rows(task: Task, data: str | None = None, split: str | None = None):
    """A `datasets.Dataset` of the task's rows, from a local JSON(L) file or the hub. Raises before any model load.

    Errors name the problem and the fix: a missing file, a file without the question or gold field.
    """
    from datasets import load_dataset

    source = data or task.hub_id
    if not source:
        where = f" (here: {task.local_copy})" if task.local_copy else ""
        raise ValueError(f"task {task.name!r} has no hub copy: pass --data with a local .jsonl of it{where}")
    if is_local(source):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"data file {path} does not exist: pass --data with a .jsonl path or a hub id")
        ds = load_dataset("json", data_files=str(path), split="train")
    else:
        ds = load_dataset(source, task.hub_config, split=split or task.hub_split)
    missing = [f for f in (task.question_field, task.gold_field) if f not in ds.column_names]
    if missing:
        raise ValueError(
            f"dataset {source} has no {missing} column(s) (it has {ds.column_names}); task {task.name!r} needs "
            f"{task.question_field!r} and {task.gold_field!r}: pick the matching --task or rename the columns"
        )
    return ds


def to_prompt_rows(task: Task, ds):
    """Add ``prompt`` (chat messages) and ``answer`` (final answer only) columns, as the rewards expect."""

    def convert(row):
        return {
            "prompt": task.prompt(row[task.question_field]),
            "answer": task.gold(row),
            "question": row[task.question_field],
        }

    return ds.map(convert, remove_columns=[c for c in ds.column_names if c in ("prompt", "answer", "question")])
