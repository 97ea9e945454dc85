"""bench.real_step's bookkeeping without the model: an arm stopped by --arm-timeout reports a lower bound for the
step it was cut in, and --matmul times float32 against bf16 autocast.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/bench/test_real_step.py
"""

import json
import subprocess
import sys
import time

import pytest

from bench import real_step


@pytest.mark.heavy  # starts a process
def test_a_stopped_arm_reports_how_long_its_unfinished_step_had_run(tmp_path):
    # a stand-in arm: one finished step, then a step that never ends (as an emulated-bf16 step under the timeout)
    out_json = tmp_path / "arm.json"
    record = {"steps": [{"wall": 3.0}], "bf16": True}
    script = (
        "import json, sys, time; record = json.loads(sys.argv[2]); record['running_since'] = time.time(); "
        "open(sys.argv[1], 'w').write(json.dumps(record)); time.sleep(60)"
    )
    process = subprocess.Popen([sys.executable, "-c", script, str(out_json), json.dumps(record)])
    while not out_json.exists():
        time.sleep(0.05)
    log = open(tmp_path / "arm.log", "w")  # noqa: SIM115 (finish_arm closes it)
    result = real_step.finish_arm("autocast_t2", (process, out_json, log), timeout=1.0)
    assert result["stopped"] and process.returncode != 0
    assert 0.5 < result["unfinished_step"] < 30
    reference = {"steps": [{"wall": 9.0}, {"wall": 2.0}], "bf16": False, "stopped": False}
    table = real_step.table({"fp32_t2": reference, "autocast_t2": result}, warmup=1)
    row = next(line for line in table.splitlines() if line.startswith("| autocast_t2"))
    bound = result["unfinished_step"]
    assert f"> {bound:.0f} s a step (stopped; warm-up step 3 s)" in row
    assert f"< {2.0 / bound:.2f}x" in row


def test_an_arm_stopped_in_its_warm_up_step_says_so():
    result = {"steps": [], "stopped": True, "unfinished_step": 412.4, "bf16": True}
    assert real_step.stopped_step(result) == "> 412 s a step (stopped; in its warm-up step)"


def test_matmul_times_both_precisions():
    text = real_step.matmul(rounds=1)
    assert "float32" in text and "bf16 autocast" in text
    ratio = float(text.split("(bf16 ")[1].split("x the time")[0])
    assert ratio > 0
