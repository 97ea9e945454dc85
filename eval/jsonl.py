"""JSON Lines I/O for the whole project: one strict reader, one atomic writer, one appender.

Everything leash reads or writes line by line goes through here, so a corrupt line is reported the same way (path,
line, fix) and a killed write never leaves half a file.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
>>> write_jsonl([{"a": 1}, {"a": 2}], path).name
'rows.jsonl'
>>> append_jsonl({"a": 3}, path)
>>> [row["a"] for row in read_jsonl(path)]
[1, 2, 3]
"""

from __future__ import annotations

import fcntl
import glob
import json
import logging
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

DEFAULT_HINT = "each line must be one JSON object"

logger = logging.getLogger(__name__)


def iter_jsonl(path: str | Path, not_json_hint: str = DEFAULT_HINT) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a missing file or corrupt line raises an error naming the fix."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {not_json_hint}")
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {n} is not JSON ({e}): {not_json_hint}") from e


def read_jsonl(path: str | Path, not_json_hint: str = DEFAULT_HINT) -> list[dict]:
    """All objects of a JSONL file, in order."""
    return [row for _, row in iter_jsonl(path, not_json_hint)]


def write_jsonl(rows: Iterable[dict], path: str | Path) -> Path:
    """Write rows as JSON lines atomically: a kill leaves the old file or the new one, never half of one. Each writer
    has its own locked temporary file, so two writers cannot tear each other's file (the last wins).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, path.name)
    fd, tmp = _locked_temp(path)
    try:
        os.fchmod(fd, _mode_of(path))  # mkstemp makes it 600: give it the mode open(path, "w") would
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.replace(tmp, path)  # before the close releases the lock: a cleaner never sees it finished and unlocked
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _mode_of(path: Path) -> int:
    """The permission bits ``open(path, "w")`` leaves: an existing file's own, a new file's 666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return new_file_mode()


def new_file_mode() -> int:
    """The permission bits of a new file: 666 less this process's umask (644 under the usual 022)."""
    return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read from ``/proc`` where it can be (setting it to read it races other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _locked_temp(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path``, open and locked (``flock``) by this process."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)


def remove_stale_temps(folder: str | Path, name: str | None = None) -> int:
    """Remove the temporary files killed ``write_jsonl`` calls left in ``folder``; returns how many. Safe while others
    write there: a live writer holds its file's lock.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / ".rows.jsonl.k1ll3d.tmp").write_text('{"a": 1}')  # what a killed write leaves
    >>> remove_stale_temps(folder, "rows.jsonl"), sorted(folder.iterdir())
    (1, [])
    """
    folder = Path(folder)
    n = 0
    for tmp in folder.glob(f".{glob.escape(name) if name else '*'}.*.tmp"):
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except FileNotFoundError:  # renamed or removed meanwhile
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its writer is alive
                continue
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:  # still the file we locked (not renamed away)
                tmp.unlink()
                n += 1
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
    if n:
        logger.info("%s: removed %d temporary file(s) left by killed writes", folder, n)
    return n


def append_jsonl(row: dict, path: str | Path, *, durable: bool = False) -> None:
    """Append one row as one line, flushed (``durable``: synced to disk, to survive a power cut). A kill mid-write can
    leave a torn last line: call ``cut_torn_last_line`` before resuming a file by appending.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        if durable:
            os.fsync(f.fileno())


def cut_torn_last_line(path: str | Path) -> int:
    """Cut a torn last line (a killed append's) off a file; returns the bytes cut. Earlier corrupt lines stay, for
    the strict reader to report.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = path.write_text('{"a": 1}\\n{"a": ')
    >>> cut_torn_last_line(path), read_jsonl(path)
    (6, [{'a': 1}])
    """
    path = Path(path)
    data = path.read_bytes() if path.exists() else b""
    if not data:
        return 0
    last_start = data.rfind(b"\n", 0, max(len(data) - 1, 0)) + 1
    last = data[last_start:]
    if last.endswith(b"\n"):
        if not last.strip():
            return 0
        try:
            json.loads(last)
            return 0
        except ValueError:  # JSONDecodeError, or a multi-byte character cut in half
            pass
    with open(path, "r+b") as f:
        f.truncate(last_start)
    return len(data) - last_start
