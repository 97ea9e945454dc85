"""eval.jsonl: the project's one JSONL reader and writer."""

import json
import os
import stat

import pytest

from eval.jsonl import append_jsonl, cut_torn_last_line, iter_jsonl, read_jsonl, write_jsonl


def test_a_corrupt_line_is_named_with_its_number_and_the_fix(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2\n{"a": 3}\n')
    rows = iter_jsonl(path, "rerun the step that wrote it")
    assert next(rows) == (1, {"a": 1})  # a blank line is skipped, the line numbers are the file's
    with pytest.raises(ValueError, match=r"rows\.jsonl line 3 is not JSON .*: rerun the step that wrote it$"):
        next(rows)


def test_a_missing_file_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl does not exist: pass --data"):
        read_jsonl(tmp_path / "nope.jsonl", "pass --data")


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "rows.jsonl"
    write_jsonl([{"q": "ü"}], path)
    assert path.read_text(encoding="utf-8") == '{"q": "ü"}\n'  # readable unicode, one object a line

    def boom(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_jsonl([{"q": "new"}], path)
    assert read_jsonl(path) == [{"q": "ü"}]  # the old file is intact
    assert sorted(p.name for p in path.parent.iterdir()) == ["rows.jsonl"]  # and no temporary file is left


def test_append_adds_whole_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    for step in range(3):
        append_jsonl({"step": step}, path)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize(
    "tail, cut",
    [
        (b'{"a": 2', 7),  # killed mid-line: no newline
        (b'{"a": 2}', 8),  # killed before the newline: the line is not known to be whole
        (b'{"a": 2\n', 8),  # a newline after a broken line
        (b'{"q": "\xc3\n', 9),  # a multi-byte character cut in half (the first of the two bytes of an accent)
        (b'{"a": 2}\n', 0),  # whole
        (b"", 0),  # nothing after the last whole line
    ],
)
def test_cut_torn_last_line_cuts_only_an_unfinished_last_line(tmp_path, tail, cut):
    path = tmp_path / "samples.jsonl"
    data = b'{"a": 0}\n{"a": 1}\n' + tail
    path.write_bytes(data)
    assert cut_torn_last_line(path) == cut
    assert path.read_bytes() == data[: len(data) - cut]
    assert [row["a"] for row in read_jsonl(path)][:2] == [0, 1]


def test_cut_torn_last_line_leaves_an_earlier_corrupt_line_to_the_strict_reader(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text('{"a": 0}\n{"a": \n{"a": 2}\n')
    assert cut_torn_last_line(path) == 0 and cut_torn_last_line(tmp_path / "missing.jsonl") == 0
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_jsonl(path)  # no kill tears a middle line: the file is reported, nothing after it is dropped


def test_write_gives_a_new_file_the_umask_mode_and_keeps_an_existing_files_mode(tmp_path):
    path = tmp_path / "rows.jsonl"
    old = os.umask(0o022)
    try:
        write_jsonl([{"a": 1}], path)  # a temporary file renamed into place: not mkstemp's 600
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o640)
        write_jsonl([{"a": 2}], path)  # as open(path, "w") would: the file keeps its mode
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
    finally:
        os.umask(old)
