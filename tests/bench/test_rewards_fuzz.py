"""bench.rewards_fuzz scores its two sets (the fuzzed completions, the hostile shapes), saves them, and a run on the
saved completions finds every score the same.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/bench/test_rewards_fuzz.py
"""

import json
import re

from bench import rewards_fuzz
from tests.rewards.test_hostile_shapes import HOSTILE_SHAPES


def test_both_sets_are_scored_saved_and_compared(tmp_path, capsys):
    saved = tmp_path / "run.json"
    assert rewards_fuzz.main(["--n", "3", "--shapes", str(len(HOSTILE_SHAPES)), "--save", str(saved)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.match(r"3 fuzzed completions x 5 rewards, batches of 64: .* score digest [0-9a-f]{16}", lines[0])
    assert lines[1].startswith("seconds per reward: gsm8k_correctness ")
    assert re.match(rf"{len(HOSTILE_SHAPES)} hostile-shape completions x 5 rewards, batches of 64: ", lines[2])
    assert lines[3].startswith("seconds per reward: gsm8k_correctness ")
    run = json.loads(saved.read_text())
    assert len(run["shapes"]["items"]) == len(run["shapes"]["scores"]) == len(HOSTILE_SHAPES)

    assert rewards_fuzz.main(["--items", str(saved), "--compare", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "0 completions score differently" in out and "0 hostile shapes score differently" in out
    import logging

    assert logging.root.manager.disable == logging.NOTSET  # the bench leaves logging on for the tests after it
