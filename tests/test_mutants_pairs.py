"""Behaviour of training_data.pairs that mutation testing (`make mutate`, docs/mutation.md) found unpinned.

OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_mutants_pairs.py
"""

import pytest

from training_data.pairs import is_rollouts_file


def test_a_corrupt_or_missing_pairs_file_is_named_with_the_fix(tmp_path):
    corrupt = tmp_path / "rollouts.jsonl"
    corrupt.write_text('{"question": "q", "completions": []}\n{not json\n')
    assert is_rollouts_file(corrupt)  # the first row tells, before the corrupt one is read
    corrupt.write_text("{not json\n")
    fix = r": pass a rollouts or pairs \.jsonl file$"
    with pytest.raises(ValueError, match=r"rollouts\.jsonl line 1 is not JSON .*" + fix):
        is_rollouts_file(corrupt)
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl does not exist" + fix):
        is_rollouts_file(tmp_path / "missing.jsonl")
