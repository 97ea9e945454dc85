"""Offline copies of the benchmarks and training sets, as the JSON-lines files every ``--data`` flag reads.

    python -m eval.data --out data                        # or: make data
    python -m eval.data --out data --tasks gsm8k math500  # only some of them

Writes ``DIR/<task>/<split>.jsonl`` in the layout of ``tests/data`` (whose README gives each source's license), from
the hub, except ``math_train``: the MATH problems outside MATH-500, from openai/prm800k's GitHub LFS
(``MATH_TRAIN_URL``), as no hub copy is vouched for. Files already there are kept, so a rerun fetches only what is
missing; ``--force`` rewrites them all. Needs network: run it online, then copy the folder to an offline machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from eval import sources
from eval.jsonl import write_jsonl
from eval.tasks import load_hub_dataset

MATH_TRAIN_URL = "https://media.githubusercontent.com/media/openai/prm800k/main/prm800k/math_splits/train.jsonl"
GSM8K_FIELDS = ("question", "answer")
MATH_FIELDS = ("problem", "solution", "answer", "subject", "level", "unique_id")


@dataclass(frozen=True)
class Source:
    file: str  # where it goes under --out
    hub_id: str  # a hub data set, or "json" with url
    config: str | None
    split: str
    fields: tuple[str, ...]
    url: str = ""


SOURCES = {
    "gsm8k": Source("gsm8k/test.jsonl", "openai/gsm8k", "main", "test", GSM8K_FIELDS),
    "gsm8k_train": Source("gsm8k/train.jsonl", "openai/gsm8k", "main", "train", GSM8K_FIELDS),
    "math500": Source("math500/test.jsonl", "HuggingFaceH4/MATH-500", None, "test", MATH_FIELDS),
    "math_train": Source("math_train/train.jsonl", "json", None, "train", MATH_FIELDS, MATH_TRAIN_URL),
}


def fetch(source: Source):
    """The ``datasets.Dataset`` of one source; a source that cannot be reached raises one line naming the fix."""
    fix = "run python -m eval.data where there is network (HF_HUB_OFFLINE unset) and copy its --out folder here"
    if not source.url:
        return load_hub_dataset(source.hub_id, source.config, source.split, fix)
    from datasets import load_dataset  # seconds to import; `eval.data --help` needs none of it

    if sources.hub_offline():  # the same switch keeps every download out
        raise sources.SourceError(f"cannot download {source.url} (HF_HUB_OFFLINE=1 keeps downloads out): {fix}")
    with tempfile.TemporaryDirectory() as folder:  # plain HTTP (the standard library), then datasets reads the file
        local = Path(folder) / Path(source.url).name
        try:
            with urllib.request.urlopen(source.url, timeout=60) as reply, local.open("wb") as f:
                f.write(reply.read())
        except OSError as error:  # URLError, timeouts and refused connections are OSErrors
            why = f"{error.__class__.__name__}: offline?"
            raise sources.SourceError(f"cannot download {source.url} ({why}): {fix}") from None
        return load_dataset("json", data_files=str(local), split=source.split)


def write_copy(name: str, out: str | Path, force: bool = False) -> tuple[Path, int | None]:
    """Write task ``name``'s file under ``out``; returns its path and the rows written (None: kept as it was)."""
    source = SOURCES[name]
    path = Path(out) / source.file
    if path.exists() and not force:
        return path, None
    ds = fetch(source)
    missing = [f for f in source.fields if f not in ds.column_names]
    if missing:
        raise ValueError(
            f"{source.url or source.hub_id} has no {missing} field(s) (it has {ds.column_names}): the source changed "
            "its layout; fetch the file by hand into " + str(path)
        )
    rows = [{f: row[f] for f in source.fields} for row in ds]
    write_jsonl(rows, path)
    return path, len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="folder to write (data/ is gitignored)")
    parser.add_argument("--tasks", nargs="+", choices=list(SOURCES), default=list(SOURCES), help="default: all")
    parser.add_argument("--force", action="store_true", help="fetch and rewrite files that are already there")
    args = parser.parse_args(argv)
    for name in args.tasks:
        try:
            path, n = write_copy(name, args.out, args.force)
        except ValueError as error:  # SourceError too: one line, no traceback
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"{path}: kept (already there; --force rewrites it)" if n is None else f"{path}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
