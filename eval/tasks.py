"""The benchmarks leash trains and evaluates on: where the data lives, how a prompt looks, what the gold is.

One prompt builder serves the recipes and eval, so a model is evaluated with the prompt it was trained on. Rows load
from the hub or a local ``.jsonl`` and come back with a ``prompt`` (chat messages) and an ``answer`` (the final answer
only, what the rewards compare against); an unreachable hub is one line naming the fix.

>>> load_rows(TASKS["math_train"])
Traceback (most recent call last):
...
ValueError: task 'math_train' has no hub copy: pass --data PATH with a local .jsonl of it (data/math_train/train.jsonl, written by python -m eval.data --out data)
"""  # noqa: E501

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from eval import sources
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
    local_copy: str = ""  # where `make data` (python -m eval.data --out data) writes a local copy; "" for none

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
        local_copy="data/gsm8k/test.jsonl",
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
        local_copy="data/math500/test.jsonl",
    ),
}
# Training sets use the same prompts and answer styles as their benchmark.
TASKS["gsm8k_train"] = Task(
    **{
        **TASKS["gsm8k"].__dict__,
        "name": "gsm8k_train",
        "hub_split": "train",
        "local_copy": "data/gsm8k/train.jsonl",
    }
)
TASKS["math_train"] = Task(
    **{
        **TASKS["math500"].__dict__,
        "name": "math_train",
        "hub_id": "",
        "hub_split": "train",
        "local_copy": "data/math_train/train.jsonl",
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


def local_copy_hint(task: Task) -> str:
    """Where the offline copy of ``task`` goes, and how to write it ("" when there is none).

    >>> local_copy_hint(TASKS["gsm8k"])
    'data/gsm8k/test.jsonl, written by python -m eval.data --out data'
    """
    return f"{task.local_copy}, written by python -m eval.data --out data" if task.local_copy else ""


def load_hub_dataset(source: str, config: str | None = None, split: str | None = None, fix: str = ""):
    """``datasets.load_dataset``, an unreachable hub or missing data set reported as one ``SourceError`` line (the hub
    is probed first: seconds, where ``datasets`` would retry for half a minute).
    """
    import datasets  # seconds to import; `eval score` and the CLIs' --help load no data set

    fix = fix or "pass --data PATH to a local .jsonl (python -m eval.data --out data writes them)"
    where = f"cannot load {source} from the Hugging Face hub"
    if not sources.hub_offline() and not sources.hub_reachable():
        raise sources.SourceError(f"{where} (it cannot be reached: offline?): {fix}")
    try:
        if config:
            return datasets.load_dataset(source, config, split=split)
        return datasets.load_dataset(source, split=split)
    except datasets.exceptions.DatasetNotFoundError:
        raise sources.SourceError(f"{where} (no such data set there, or offline?): {fix}") from None
    except ConnectionError:
        why = "offline: HF_HUB_OFFLINE=1 and no cached copy" if sources.hub_offline() else "offline?"
        raise sources.SourceError(f"{where} ({why}): {fix}") from None
    except OSError as error:
        raise sources.SourceError(f"{where} ({error.__class__.__name__}: {str(error)[:200]}): {fix}") from None


@contextmanager
def no_progress_bars():
    """datasets' progress bars off inside: for a local file they would come before the command's own first line."""
    import datasets  # as in load_hub_dataset

    if datasets.are_progress_bars_disabled():
        yield
        return
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars()


def _blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (read until its first other character)."""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return False
    return True


def load_rows(task: Task, data: str | None = None, split: str | None = None, flag: str = "--data"):
    """A ``datasets.Dataset`` of the task's rows from a local JSON(L) file or the hub; errors name the ``flag``."""
    import datasets  # as in load_hub_dataset

    source = data or task.hub_id
    hint = local_copy_hint(task)
    where = f" ({hint})" if hint else ""
    usage = flag if "PATH" in flag else f"{flag} PATH"
    if not source:
        raise ValueError(f"task {task.name!r} has no hub copy: pass {usage} with a local .jsonl of it{where}")
    if is_local(source):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"data file {path} does not exist: pass {usage} with a .jsonl path or a hub id")
        empty = ValueError(f"data file {path} holds no rows: pass {usage} with a .jsonl of the task's problems")
        if _blank(path):  # datasets stops with a bare StopIteration on a file with nothing in it
            raise empty
        with no_progress_bars():
            ds = datasets.load_dataset("json", data_files=str(path), split="train")
        if len(ds) == 0:
            raise empty
    else:
        fix = f"pass {usage} to a local .jsonl{where}"
        ds = load_hub_dataset(source, task.hub_config, split or task.hub_split, fix)
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

    with no_progress_bars():
        return ds.map(convert, remove_columns=[c for c in ds.column_names if c in ("prompt", "answer", "question")])


def one_prompt_rows(task: Task, question: str, answer: str, instruction: str | None = None):
    """A training set of one row: ``question`` and ``instruction`` (default: the task's) as the prompt, gold ``answer``.

    >>> rows = one_prompt_rows(TASKS["gsm8k"], "Priya has 4 x 6 muffins and gives away 7. How many are left?", "17",
    ...                        "Finish your reply with a line 'Answer: <number>'.")
    >>> rows[0]["answer"], rows[0]["prompt"][0]["content"].splitlines()[-1]
    ('17', "Finish your reply with a line 'Answer: <number>'.")
    """
    import datasets  # as in load_hub_dataset

    prompt = (replace(task, instruction=instruction) if instruction else task).prompt(question)
    return datasets.Dataset.from_list([{"prompt": prompt, "question": question.strip(), "answer": str(answer).strip()}])
