"""The first contact with the outside world fails in one line that names the fix, in every command, before any work.

A data set on a hub that cannot be reached, a model that is neither a local folder nor loadable from the hub, an
adapter folder that is not there, a judge endpoint where no server answers: each command prints ``error: ...`` (one
line on stderr, no traceback) and exits with status 2, before a model loads. ``HF_HUB_OFFLINE=1`` (tests/conftest.py,
and the ``offline`` fixture here) makes hub access fail the same way on every machine; the network itself is never
touched (an "online" hub is stood in for by monkeypatching).

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/project/test_first_contact.py
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from eval import sources
from eval.jsonl import write_jsonl
from eval.sources import SourceError, check_endpoint, check_model_source
from recipes.checks import check_model
from recipes.common import run_cli as recipe_cli

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "configs" / "tiny"
JUDGE_TINY = ROOT / "recipes" / "configs" / "judge_lab" / "tiny"
NOT_CACHED = "leash-test/not-a-cached-model"  # a hub id that no cache holds
SECRET = "sk-first-contact-secret-value"  # an API key that must never be printed


@pytest.fixture
def offline(monkeypatch):
    """The hub libraries in offline mode, whatever the environment says."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.fixture
def fake_model(tmp_path) -> str:
    """A folder that passes the model-source check (config.json) but holds no model: loading it would fail."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return str(folder)


@pytest.fixture
def pairs(tmp_path) -> str:
    return str(write_jsonl([{"prompt": "Q", "chosen": "good", "rejected": "bad"}] * 4, tmp_path / "pairs.jsonl"))


@pytest.fixture
def closed_port() -> int:
    """A localhost port where nothing listens: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ModelsServer:
    """A tiny OpenAI-compatible server on 127.0.0.1: GET /v1/models lists one model, POST /v1/chat/completions
    replies "Score: 7"; with ``key`` set, a request without ``Bearer key`` gets 401."""

    def __init__(self, key: str | None = None):
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                server.auth.append(self.headers.get("Authorization"))
                if key and self.headers.get("Authorization") != f"Bearer {key}":
                    self._reply(401, {"error": "bad key"})
                    return False
                return True

            def do_GET(self):
                if not self._authorised():
                    return
                if self.path != "/v1/models":
                    return self._reply(404, {"error": "not found"})
                self._reply(200, {"object": "list", "data": [{"id": "judge", "object": "model"}]})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if not self._authorised():
                    return
                choice = {"index": 0, "message": {"role": "assistant", "content": "Score: 7"}, "finish_reason": "stop"}
                self._reply(200, {"id": "x", "object": "chat.completion", "choices": [choice]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def models_server():
    server = ModelsServer()
    yield server
    server.close()


def run_cli(module: str, argv: list[str], monkeypatch) -> int:
    """Run a command's entry point in this process, as ``python -m module argv`` would; returns the exit status."""
    import importlib

    mod = importlib.import_module("eval.__main__" if module == "eval" else module)
    if hasattr(mod, "make_parser") and module.startswith(("recipes.", "judge_lab.")):
        monkeypatch.setattr(sys, "argv", [module, *argv])
        call = lambda: recipe_cli(mod.make_parser, mod.main)  # noqa: E731
    else:
        call = lambda: mod.main(argv)  # noqa: E731
    try:
        status = call()
    except SystemExit as e:
        return e.code
    return status or 0


PROGRESS_BAR = re.compile(r"\[\d\d:\d\d")  # tqdm's elapsed time: datasets reading a local file, a model written


def one_line_error(capsys, *fragments: str) -> str:
    """The command's stderr is one ``error: ...`` line holding every fragment (no traceback, no usage block); the
    progress bars of work done before it (a local data file read) are not lines of the error."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not PROGRESS_BAR.search(line)]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a model fails the test: every check must come first."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    import eval.__main__

    monkeypatch.setattr(eval.__main__, "load_model", refuse)
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModelForSequenceClassification):
        monkeypatch.setattr(cls, "from_pretrained", refuse)


# --- hub data that cannot be reached ------------------------------------------------------------------------------

HUB_DATA_CASES = [
    # (command, argv without the output folder, what the line must name)
    ("eval", ["run", "--model", "{model}", "--task", "gsm8k"], ["openai/gsm8k", "--data PATH", "python -m eval.data"]),
    (
        "eval",
        ["run", "--model", "{model}", "--task", "math500", "--limit", "3"],
        ["HuggingFaceH4/MATH-500", "data/math500/test.jsonl", "python -m eval.data --out data"],
    ),
    (
        "training_data.rollouts",
        ["sample", "--model", "{model}", "--task", "gsm8k_train", "--k", "2"],
        ["openai/gsm8k", "data/gsm8k/train.jsonl"],
    ),
    ("training_data.rollouts", ["reference", "--task", "gsm8k_train"], ["openai/gsm8k", "--data PATH"]),
    (
        "recipes.grpo",
        ["--config", f"{TINY}/grpo_cpu.yaml", "--model_name_or_path", "{model}", "--data", ""],
        ["openai/gsm8k", "--data PATH", "data/gsm8k/train.jsonl"],
    ),
    (  # the held-out set is loaded (and checked) before the model, not after it
        "recipes.grpo",
        ["--config", f"{TINY}/grpo_cpu.yaml", "--model_name_or_path", "{model}", "--eval_data", ""],
        ["openai/gsm8k", "--eval_data PATH", "data/gsm8k/test.jsonl"],
    ),
    (
        "recipes.dpo",
        ["--config", f"{TINY}/dpo_cpu.yaml", "--model_name_or_path", "{model}", "--data", "{pairs}", "--eval_data", ""],
        ["openai/gsm8k", "--eval_data PATH"],
    ),
    (  # a hub preference data set
        "recipes.dpo",
        ["--config", f"{TINY}/dpo_cpu.yaml", "--model_name_or_path", "{model}", "--data", "someone/prefs"],
        ["someone/prefs", "rollouts or pairs .jsonl"],
    ),
    (  # a real (tiny) model: the recipe reads its tokenizer's chat template before the pairs
        "recipes.reward_model",
        ["--config", f"{TINY}/reward_model_cpu.yaml", "--model_name_or_path", "{tiny}", "--data", "someone/prefs"],
        ["someone/prefs", "rollouts or pairs .jsonl"],
    ),
    ("eval.probe_matrix", ["--n", "2"], ["openai/gsm8k", "--data gsm8k=PATH"]),
    ("eval.data", ["--tasks", "gsm8k"], ["openai/gsm8k", "where there is network"]),
    ("eval.data", ["--tasks", "math_train"], ["media.githubusercontent.com", "HF_HUB_OFFLINE=1"]),
]


def fill(argv: list[str], tmp_path: Path, **values: str) -> list[str]:
    out = str(tmp_path / "out")
    filled = [a.format(**values) if "{" in a else a for a in argv]
    if filled[0] in ("run", "score", "sample", "reference"):
        return [*filled, "--out", out]
    if any(a == "--config" for a in filled):
        return [*filled, "--output_dir", out, "--build_tiny_model", "false", "--report_to", "none"]
    if "--tasks" in filled:
        return [*filled, "--out", out]
    return filled


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize("module, argv, named", HUB_DATA_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_hub_data_offline_is_one_line(
    module, argv, named, offline, fake_model, pairs, tmp_path, no_model_load, capsys, monkeypatch, request
):
    tiny = str(request.getfixturevalue("tiny_model_dir")) if "{tiny}" in argv else ""
    status = run_cli(module, fill(argv, tmp_path, model=fake_model, pairs=pairs, tiny=tiny), monkeypatch)
    assert status == 2
    line = one_line_error(capsys, *named)
    assert "cannot load" in line or "cannot download" in line
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_hub_data_that_cannot_be_reached_fails_at_once(monkeypatch):
    # online, but no network: the quick probe answers instead of datasets' half-minute of retries
    import datasets

    from eval.tasks import get_task, load_rows

    monkeypatch.setattr(sources, "hub_offline", lambda: False)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout_s=3.0: False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("load_dataset was called"))
    with pytest.raises(SourceError, match=r"cannot load openai/gsm8k from the Hugging Face hub \(it cannot be reached"):
        load_rows(get_task("gsm8k"))


def test_no_such_hub_data_set_is_one_line(monkeypatch):
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    from eval.tasks import get_task, load_rows

    def missing(*args, **kwargs):
        raise DatasetNotFoundError("Dataset 'someone/typo' doesn't exist on the Hub or cannot be accessed.")

    monkeypatch.setattr(sources, "hub_offline", lambda: False)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr(datasets, "load_dataset", missing)
    with pytest.raises(SourceError, match=r"cannot load someone/typo .*no such data set there.*--data PATH"):
        load_rows(get_task("gsm8k"), "someone/typo")


def test_every_data_load_goes_through_load_rows_or_load_hub_dataset():
    # the one place the hub errors are caught: no other module calls datasets.load_dataset on a hub id
    callers = {
        str(path.relative_to(ROOT))
        for package in ("rewards", "eval", "training_data", "recipes", "cpu_lab", "judge_lab", "reward_model_lab")
        for path in (ROOT / package).rglob("*.py")
        if "load_dataset(" in path.read_text(encoding="utf-8")
    }
    assert callers == {"eval/tasks.py", "eval/data.py", "training_data/pairs.py"}
    for name in ("eval/data.py", "training_data/pairs.py"):  # local JSON files only; hub ids via load_hub_dataset
        text = (ROOT / name).read_text(encoding="utf-8")
        assert all('load_dataset("json"' in line for line in text.splitlines() if "load_dataset(" in line)


# --- models that are neither a local folder nor loadable ---------------------------------------------------------

MODEL_CASES = [
    # (command, argv, model value, what the line must name)
    ("eval", ["run", "--task", "gsm8k", "--data", "{data}", "--model", "{bad}"], "--model"),
    ("eval", ["score", "--task", "gsm8k", "--predictions", "{data}", "--tokenizer", "{bad}"], "--tokenizer"),
    ("training_data.rollouts", ["sample", "--task", "gsm8k", "--data", "{data}", "--model", "{bad}"], "--model"),
    (
        "training_data.rollouts",
        ["reference", "--task", "gsm8k", "--data", "{data}", "--tokenizer", "{bad}"],
        "--tokenizer",
    ),
    ("recipes.grpo", ["--config", f"{TINY}/grpo_cpu.yaml", "--model_name_or_path", "{bad}"], "model_name_or_path"),
    (
        "recipes.dpo",
        ["--config", f"{TINY}/dpo_cpu.yaml", "--data", "{pairs}", "--model_name_or_path", "{bad}"],
        "model_name_or_path",
    ),
    (
        "recipes.reward_model",
        ["--config", f"{TINY}/reward_model_cpu.yaml", "--data", "{pairs}", "--model_name_or_path", "{bad}"],
        "model_name_or_path",
    ),
    (
        "recipes.grpo",
        ["--config", f"{JUDGE_TINY}/judge_lab_tiny_checker_b0.04.yaml", "--model_name_or_path", "{bad}"],
        "model_name_or_path",
    ),
    (  # a local judge model
        "recipes.grpo",
        ["--config", f"{JUDGE_TINY}/judge_lab_tiny_judge_b0.04.yaml", "--model_name_or_path", "{model}"]
        + ["--judge_model", "{bad}"],
        "judge_model",
    ),
]


@pytest.mark.parametrize("kind", ["unknown_local_path", "hub_id_not_in_cache"])
@pytest.mark.parametrize("module, argv, what", MODEL_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_a_model_that_cannot_be_loaded_is_one_line(
    module, argv, what, kind, offline, fake_model, pairs, data_dir, tmp_path, no_model_load, capsys, monkeypatch
):
    bad = str(tmp_path / "no" / "such" / "model") if kind == "unknown_local_path" else NOT_CACHED
    values = {"bad": bad, "model": fake_model, "pairs": pairs, "data": str(data_dir / "gsm8k" / "test.jsonl")}
    argv = fill(argv, tmp_path, **values)
    if module == "eval" and argv[0] == "score":
        argv += ["--completion-field", "answer"]
    status = run_cli(module, argv, monkeypatch)
    assert status == 2
    if kind == "unknown_local_path":
        one_line_error(capsys, f"{what} '{bad}' does not exist", "pass a local model folder")
    else:
        one_line_error(capsys, f"{what} '{bad}'", "HF_HUB_OFFLINE=1", f"`hf download {bad}`")


def test_model_source_check_by_kind(tmp_path, monkeypatch, offline):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="is a folder without config.json"):
        check_model_source(str(tmp_path / "empty"), "--model")
    (tmp_path / "weights.bin").write_text("")
    with pytest.raises(SourceError, match="is a file, not a model folder"):
        check_model_source(str(tmp_path / "weights.bin"), "--model")
    with pytest.raises(SourceError, match="--model is empty"):
        check_model_source("", "--model")
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text("{}")
    check_model_source(str(tmp_path / "ok"))  # a local model folder
    # a hub id in the cache loads offline
    monkeypatch.setattr(sources, "_in_hub_cache", lambda name, files, revision: name == "org/cached")
    check_model_source("org/cached")
    # online: a hub that cannot be reached, then a hub without that model
    monkeypatch.setattr(sources, "hub_offline", lambda: False)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout_s=3.0: False)
    with pytest.raises(SourceError, match=r"the hub cannot be reached \(offline\?\).*hf download org/m"):
        check_model_source("org/m", "--model")
    import huggingface_hub

    monkeypatch.setattr(sources, "hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda name, filename, revision=None: name == "org/real")
    with pytest.raises(SourceError, match="nor a model on the Hugging Face hub"):
        check_model_source("org/typo", "--model")
    check_model_source("org/real")  # on the hub: transformers downloads it


def test_build_tiny_model_makes_a_missing_folder_fine(tmp_path):
    from trl import ModelConfig

    check_model(ModelConfig(model_name_or_path=str(tmp_path / "tiny")), build_tiny_model=True)  # built later
    with pytest.raises(SourceError, match="does not exist"):
        check_model(ModelConfig(model_name_or_path=str(tmp_path / "tiny")))


# --- adapters -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, argv",
    [
        ("eval", ["run", "--task", "gsm8k", "--data", "{data}", "--model", "{model}", "--adapter", "{adapter}"]),
        (
            "training_data.rollouts",
            ["sample", "--task", "gsm8k", "--data", "{data}", "--model", "{model}", "--adapter", "{adapter}"],
        ),
    ],
    ids=["eval run", "rollouts sample"],
)
def test_an_adapter_folder_that_is_not_there_is_one_line(
    module, argv, fake_model, data_dir, tmp_path, no_model_load, capsys, monkeypatch
):
    adapter = str(tmp_path / "runs" / "grpo" / "final")
    values = {"model": fake_model, "adapter": adapter, "data": str(data_dir / "gsm8k" / "test.jsonl")}
    assert run_cli(module, fill(argv, tmp_path, **values), monkeypatch) == 2
    one_line_error(capsys, f"--adapter {adapter}: no such folder", "peft")


# --- judge endpoints ----------------------------------------------------------------------------------------------


def test_endpoint_probe_on_a_closed_port_names_the_url_and_the_fix(closed_port):
    url = f"http://127.0.0.1:{closed_port}/v1"
    with pytest.raises(SourceError, match=rf"the judge endpoint {url} does not answer \(GET {url}/models.*: start it"):
        check_endpoint(url, SECRET, "start it", what="the judge endpoint", timeout_s=2)


def test_endpoint_probe_on_a_server_that_answers(models_server):
    assert check_endpoint(models_server.base_url, timeout_s=2)["data"][0]["id"] == "judge"
    assert models_server.auth == [None]  # no key, no Authorization header


def test_endpoint_probe_with_a_refused_key_never_shows_it(monkeypatch):
    server = ModelsServer(key="the-right-key")
    try:
        with pytest.raises(SourceError, match="refused the API key") as error:
            check_endpoint(server.base_url, SECRET, timeout_s=2)
        assert SECRET not in str(error.value) and server.auth == [f"Bearer {SECRET}"]  # sent, never shown
        assert check_endpoint(server.base_url, "the-right-key", timeout_s=2) is not None
    finally:
        server.close()


def test_judge_lab_with_no_server_at_the_url_is_one_line(closed_port, fake_model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FIRST_CONTACT_KEY", SECRET)
    url = f"http://127.0.0.1:{closed_port}/v1"
    argv = ["--config", f"{JUDGE_TINY}/judge_lab_tiny_judge_b0.04.yaml", "--model_name_or_path", fake_model]
    argv += ["--judge_backend", "openai", "--judge_base_url", url, "--judge_model", "judge"]
    argv += ["--judge_api_key_env", "FIRST_CONTACT_KEY", "--judge_max_retries", "0"]
    assert run_cli("recipes.grpo", fill(argv, tmp_path), monkeypatch) == 2
    line = one_line_error(capsys, f"the judge endpoint {url} does not answer", "vllm serve judge", "--judge_base_url")
    assert SECRET not in line


@pytest.mark.heavy  # starts a process
def test_judge_lab_with_a_server_that_answers_goes_on_to_the_next_check(
    models_server, tmp_path, capsys, monkeypatch, no_model_load
):
    # the endpoint passes (GET /v1/models, then one chat request); the policy model is what is refused next
    bad = str(tmp_path / "no" / "policy")
    argv = ["--config", f"{JUDGE_TINY}/judge_lab_tiny_judge_b0.04.yaml", "--model_name_or_path", bad]
    argv += ["--judge_backend", "openai", "--judge_base_url", models_server.base_url, "--judge_model", "judge"]
    assert run_cli("recipes.grpo", fill(argv, tmp_path), monkeypatch) == 2
    one_line_error(capsys, f"model_name_or_path '{bad}' does not exist")
    assert len(models_server.auth) == 2  # the probe and the one judged answer


def test_grpo_with_llm_judge_checks_the_judge_before_the_model(closed_port, fake_model, tmp_path, capsys, monkeypatch):
    url = f"http://127.0.0.1:{closed_port}/v1"
    argv = ["--config", f"{TINY}/grpo_cpu.yaml", "--model_name_or_path", fake_model]
    argv += ["--reward_funcs", "gsm8k_correctness", "llm_judge", "--reward_weights", "1.0", "0.1"]
    argv += ["--reward_check", "warn", "--judge_model", "judge", "--judge_base_url", url]
    assert run_cli("recipes.grpo", fill(argv, tmp_path), monkeypatch) == 2
    one_line_error(capsys, f"the judge endpoint {url} does not answer", "--judge_base_url")


def test_grpo_with_llm_judge_and_no_judge_set_is_one_line(fake_model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LEASH_JUDGE_MODEL", "judge")  # the recipe's judge is set by its options, not the environment
    argv = ["--config", f"{TINY}/grpo_cpu.yaml", "--model_name_or_path", fake_model]
    argv += ["--reward_funcs", "gsm8k_correctness", "llm_judge", "--reward_weights", "1.0", "0.1"]
    assert run_cli("recipes.grpo", fill(argv + ["--reward_check", "warn"], tmp_path), monkeypatch) == 2
    one_line_error(capsys, "reward llm_judge needs judge_model")


# --- eval.data ----------------------------------------------------------------------------------------------------


def test_eval_data_writes_the_layout_leash_reads_and_a_second_run_keeps_it(tmp_path, monkeypatch, capsys, offline):
    import datasets

    from eval import data as eval_data
    from eval.tasks import get_task, load_rows

    gsm8k = [{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}]
    math = [
        {
            "problem": "What is $1+1$?",
            "solution": "$1+1=\\boxed{2}$",
            "answer": "2",
            "subject": "Prealgebra",
            "level": 1,
            "unique_id": "test/prealgebra/1.json",
            "extra": "not kept",
        }
    ]
    calls = []

    def fake_load_dataset(path, name=None, *, split=None, data_files=None):
        calls.append((path, name, split, data_files))
        rows = gsm8k if path == "openai/gsm8k" else math
        return datasets.Dataset.from_list([{**r, "question": r.get("question", "") + split} for r in rows])

    import io
    import urllib.request

    from eval import sources

    fetched = []

    def fake_urlopen(url, timeout):  # MATH train comes over plain HTTP, then datasets reads the downloaded file
        fetched.append(url)
        return io.BytesIO("".join(json.dumps(r) + "\n" for r in math).encode())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(sources, "hub_offline", lambda: False)  # the hub itself is the fake above
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert eval_data.main(["--out", str(tmp_path)]) == 0
    assert calls[:3] == [
        ("openai/gsm8k", "main", "test", None),
        ("openai/gsm8k", "main", "train", None),
        ("HuggingFaceH4/MATH-500", None, "test", None),
    ]
    assert calls[3][:3] == ("json", None, "train") and calls[3][3].endswith("train.jsonl") and len(calls) == 4
    assert fetched == [eval_data.MATH_TRAIN_URL]
    files = {p.relative_to(tmp_path).as_posix(): p.read_text() for p in sorted(tmp_path.rglob("*.jsonl"))}
    assert sorted(files) == ["gsm8k/test.jsonl", "gsm8k/train.jsonl", "math500/test.jsonl", "math_train/train.jsonl"]
    assert sorted(files) == sorted(  # the layout of the shipped test data
        p.relative_to(ROOT / "tests" / "data").as_posix()
        for p in (ROOT / "tests" / "data").glob("*/*.jsonl")
        if p.parent.name not in ("model_outputs", "hack_alarm")  # stored run outputs, not data sets
    )
    assert json.loads(files["gsm8k/train.jsonl"]) == {"question": "What is 2 + 3?train", "answer": "2 + 3 = 5\n#### 5"}
    assert list(json.loads(files["math_train/train.jsonl"])) == list(eval_data.MATH_FIELDS)  # fields as tests/data's
    for task, path in (("gsm8k", "gsm8k/test.jsonl"), ("math500", "math500/test.jsonl")):  # what --data reads
        assert len(load_rows(get_task(task), str(tmp_path / path))) == 1

    # a second run fetches nothing and changes nothing
    calls.clear()
    capsys.readouterr()
    assert eval_data.main(["--out", str(tmp_path)]) == 0
    assert calls == [] and "kept (already there" in capsys.readouterr().out
    assert {p.relative_to(tmp_path).as_posix(): p.read_text() for p in tmp_path.rglob("*.jsonl")} == files
    assert eval_data.main(["--out", str(tmp_path), "--tasks", "gsm8k", "--force"]) == 0  # --force fetches again
    assert len(calls) == 1 and (tmp_path / "gsm8k" / "test.jsonl").read_text() == files["gsm8k/test.jsonl"]


def test_eval_data_source_with_other_fields_is_refused(tmp_path, monkeypatch, capsys, offline):
    import datasets

    from eval import data as eval_data

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_list([{"text": "x"}]))
    assert eval_data.main(["--out", str(tmp_path), "--tasks", "math500"]) == 2
    one_line_error(capsys, "has no ['problem', 'solution', 'answer', 'subject', 'level', 'unique_id'] field(s)")
    assert not (tmp_path / "math500" / "test.jsonl").exists()


# --- as a user runs them: fresh processes, offline --------------------------------------------------------------


@pytest.mark.heavy  # starts a process
@pytest.mark.parametrize(
    "argv, named",
    [
        (["-m", "eval", "run", "--model", "{model}", "--task", "gsm8k", "--out", "{out}"], "cannot load openai/gsm8k"),
        (["-m", "eval", "run", "--model", NOT_CACHED, "--task", "gsm8k", "--out", "{out}"], f"--model '{NOT_CACHED}'"),
    ],
    ids=["eval run without --data", "eval run with a model not in the cache"],
)
def test_offline_command_prints_one_line(argv, named, fake_model, tmp_path):
    env = os.environ | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    argv = [a.format(model=fake_model, out=tmp_path / "out") for a in argv]
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and named in done.stderr, done.stderr


def test_judge_noise_probe_with_no_server_at_the_url_stops_before_any_request(closed_port, tmp_path, capsys):
    from judge_lab import noise

    url = f"http://127.0.0.1:{closed_port}/v1"
    with pytest.raises(SystemExit) as exit_info:
        noise.main(["--judge_base_url", url, "--judge_model", "judge", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and f"the judge endpoint {url} does not answer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
