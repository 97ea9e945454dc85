"""The LLM-judge reward against a real chat-completions server on 127.0.0.1 (started here, in a thread), and the lab's
strict checker. Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_judge.py``.

The server reads what to do from the answer it is asked to judge (``SCORE 7``, ``SLOW``, ``HTTP500``, ...), records
every request (body, Authorization header and arrival time), and counts requests in flight. The client under test is
the real ``openai`` client, so these tests check what it does on the wire (retries, ``Retry-After``, timeouts, headers),
not what we asked it to do.
"""

from __future__ import annotations

import json
import logging
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rewards.judge import (
    HFJudgeClient,
    JudgeReward,
    OpenAIJudgeClient,
    answer_line_correctness_reward,
    make_judge_reward,
    parse_score,
)

SENTINEL_KEY = "sk-SENTINEL-7f3a9c-never-log-me"
KEY_ENV = "LEASH_TEST_JUDGE_KEY"


class FakeJudgeServer:
    """An OpenAI-compatible /v1/chat/completions endpoint whose behaviour is chosen by the judged answer."""

    def __init__(self, slow_s: float = 1.0):
        self.requests: list[dict] = []
        self.auth_headers: list[str | None] = []
        self.seen: dict[str, int] = {}
        self.arrivals: dict[str, list[float]] = {}  # time.monotonic() of each request, per answer
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.slow_s = slow_s
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output quiet
                pass

            def _reply(self, status: int, payload: dict | str, headers: dict | None = None):
                self._done()  # before the reply leaves: once the client has it, it may send its next request
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.auth_headers.append(self.headers.get("Authorization"))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    answer = body["messages"][-1]["content"].split("Student's answer:\n")[1].split("\n")[0]
                    server.seen[answer] = server.seen.get(answer, 0) + 1
                    server.arrivals.setdefault(answer, []).append(time.monotonic())
                    times_seen = server.seen[answer]
                self._counted = True
                try:
                    self._behave(answer, times_seen)
                finally:
                    self._done()

            def _done(self):
                if getattr(self, "_counted", False):
                    self._counted = False
                    with server.lock:
                        server.in_flight -= 1

            def _behave(self, answer: str, times_seen: int):
                def chat(text):
                    return {"id": "x", "object": "chat.completion", "choices": [{"message": {"content": text}}]}

                if self.path != "/v1/chat/completions":
                    return self._reply(404, {"error": "not found"})
                if answer.startswith("LP "):  # "LP 7=0.6,8=0.3|0=0.5": top log-probabilities per position
                    return self._reply(200, logprob_chat(answer[3:]))
                if answer.startswith("SCORE"):
                    time.sleep(0.05)  # long enough for concurrent requests to overlap
                    return self._reply(200, chat(answer.split()[1]))
                if answer == "SLOW":
                    time.sleep(server.slow_s)
                    return self._reply(200, chat("9"))
                if answer == "HTTP500":
                    return self._reply(500, {"error": "overloaded"})
                if answer == "HTTP401":  # a careless server that echoes the key back
                    return self._reply(401, {"error": f"bad key {self.headers.get('Authorization')}"})
                if answer == "NOISY":  # the same answer, a different score each time: 2, 8, 9, 2, ...
                    return self._reply(200, chat("289"[(times_seen - 1) % 3]))
                if answer == "GARBAGE":
                    return self._reply(200, chat("This answer looks plausible to me!"))
                if answer == "NOT_JSON":
                    return self._reply(200, "<html>gateway</html>")
                if answer == "RATE_LIMITED_ONCE":
                    if times_seen == 1:
                        return self._reply(429, {"error": "slow down"}, {"Retry-After": "1"})
                    return self._reply(200, chat("Score: 8/10"))
                return self._reply(200, chat(str(len(answer) % 11)))  # anything else: a score that varies

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def logprob_chat(spec: str) -> dict:
    """A chat completion with ``logprobs.content`` as vLLM/OpenAI return it: per position, the sampled (most likely)
    token and its ``top_logprobs``. ``spec`` is ``tok=p,tok=p|tok=p`` (positions separated by ``|``)."""
    import math

    content = []
    for position in spec.split("|"):
        pairs = [(tok.replace("_", " "), float(p)) for tok, p in (item.split("=") for item in position.split(","))]
        top = [{"token": tok, "logprob": math.log(p), "bytes": list(tok.encode())} for tok, p in pairs]
        content.append(
            {
                "token": max(pairs, key=lambda tp: tp[1])[0],
                "logprob": max(t["logprob"] for t in top),
                "top_logprobs": top,
            }
        )
    text = "".join(position["token"] for position in content)
    return {"choices": [{"message": {"content": text}, "logprobs": {"content": content}}]}


@pytest.fixture
def server():
    with FakeJudgeServer() as s:
        yield s


@pytest.fixture
def judge_log(tmp_path, monkeypatch):
    """Every log record of the run, at DEBUG, written to a file (to grep for the key afterwards)."""
    monkeypatch.setenv(KEY_ENV, SENTINEL_KEY)
    path = tmp_path / "judge.log"
    handler = logging.FileHandler(path)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield path
    root.removeHandler(handler)
    root.setLevel(old_level)
    handler.close()


def make_client(server, **overrides):
    settings = dict(api_key_env=KEY_ENV, timeout_s=0.3, max_retries=1, max_concurrency=4)
    settings.update(overrides)
    return OpenAIJudgeClient(server.base_url, "judge-model", **settings)


def conversation(answer: str) -> list[dict]:
    from rewards.judge import judge_messages

    return judge_messages("Priya buys four boxes of six muffins and gives away seven. How many are left?", answer)


CASES = [
    # (answer the server reacts to, expected score, expected error substring or None, expected attempts)
    ("SCORE 7", 7.0, None, 1),  # plain score
    ("SCORE 10", 10.0, None, 1),  # top of the range
    ("GARBAGE", None, None, 1),  # 200 with prose and no score: unparseable, not retried, not crashed
    ("HTTP500", None, "HTTP 500", 2),  # server error: retried once (max_retries=1), then given up
    ("SLOW", None, "timeout", 2),  # reply slower than timeout_s: retried, then given up
    ("RATE_LIMITED_ONCE", 8.0, None, 2),  # 429 (Retry-After: 1) then success: one retry
    ("NOT_JSON", None, "malformed", 1),  # 200 with a non-JSON body: not retried
    ("HTTP401", None, "HTTP 401", 1),  # client error: not retried
]


@pytest.mark.parametrize("answer,score,error,attempts", CASES, ids=[c[0] for c in CASES])
def test_judge_client_behaviours(server, judge_log, answer, score, error, attempts):
    client = make_client(server)
    [result] = client.score_many([conversation(answer)])
    assert result.score == score
    assert (result.error is None) if error is None else (error in result.error)
    assert server.seen[answer] == attempts
    assert client.stats.requests == attempts and client.stats.retries == attempts - 1
    assert SENTINEL_KEY not in (result.error or "")  # the key was sent (judge_log sets it); no error text holds it


def test_retry_after_is_honoured(server, judge_log):
    [result] = make_client(server).score_many([conversation("RATE_LIMITED_ONCE")])
    first, second = server.arrivals["RATE_LIMITED_ONCE"]
    assert result.score == 8.0
    assert second - first >= 1.0  # the server's Retry-After: 1, not openai's own first backoff (at most 0.5 s)


def test_timeout_is_real(judge_log):
    with FakeJudgeServer(slow_s=3.0) as slow_server:
        client = make_client(slow_server, timeout_s=0.3, max_retries=1)
        start = time.monotonic()
        [result] = client.score_many([conversation("SLOW")])
        elapsed = time.monotonic() - start
    assert result.score is None and "timeout after 0.3 s" in result.error
    assert slow_server.seen["SLOW"] == 2  # both attempts reached the server ...
    assert elapsed < 3.0  # ... and were abandoned after 0.3 s each (+ backoff): waiting for one reply takes 3 s


def test_unparseable_and_failed_replies_are_counted_logged_and_give_none(server, judge_log):
    reward = JudgeReward(make_client(server))
    extra, metrics = {}, {}
    completions = [[{"role": "assistant", "content": a}] for a in ("SCORE 9", "GARBAGE", "HTTP500", "SCORE 2")]
    rewards = reward(
        prompts=[[{"role": "user", "content": "q"}]] * 4,
        completions=completions,
        log_extra=extra.__setitem__,
        log_metric=metrics.__setitem__,
    )
    assert rewards == [0.9, None, None, 0.2]
    assert extra["judge_score"] == [9.0, None, None, 2.0]
    assert metrics == {"judge/unparseable_frac": 0.25, "judge/failed_frac": 0.25}
    assert reward.client.stats.as_dict() == {
        "requests": 5,
        "scored": 2,
        "unparseable": 1,
        "low_mass": 0,
        "failed": 1,
        "retries": 1,
        "ten_unresolved": 0,
    }
    log = judge_log.read_text()
    assert "holds no 0-10 score" in log and "This answer looks plausible" in log and "HTTP 500" in log


def test_key_is_sent_but_never_logged_pickled_or_printed(server, judge_log):
    reward = JudgeReward(make_client(server))
    answers = [a for a, *_ in CASES]
    reward(prompts=["q"] * len(answers), completions=answers)
    # the key reached the server (so the redaction below is not vacuous) ...
    assert set(server.auth_headers) == {f"Bearer {SENTINEL_KEY}"}
    # ... and appears nowhere we write: log file (which holds the 401 body that echoed it), repr, pickle
    log = judge_log.read_text()
    assert "HTTP 401" in log and "Bearer ***" in log
    assert SENTINEL_KEY not in log
    assert SENTINEL_KEY not in repr(reward)
    assert SENTINEL_KEY.encode() not in pickle.dumps(reward)
    assert pickle.loads(pickle.dumps(reward))(prompts=["q"], completions=["SCORE 5"]) == [0.5]  # and still works


def test_no_key_variable_sends_no_authorization(server, judge_log, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)  # the openai client's own default: must not be read
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nor this one: the judge's base_url wins
    client = make_client(server, api_key_env=None)
    assert client.score_many([conversation("SCORE 3")])[0].score == 3.0
    assert server.auth_headers == [None]


def test_key_is_read_from_the_environment_at_each_request(server, judge_log, monkeypatch):
    client = make_client(server)
    client.score_many([conversation("SCORE 1")])
    monkeypatch.setenv(KEY_ENV, "sk-rotated")  # a key rotated while training runs is picked up
    client.score_many([conversation("SCORE 2")])
    monkeypatch.delenv(KEY_ENV)  # an unset variable: a failed result naming it, and no request without the key
    [result] = client.score_many([conversation("SCORE 3")])
    assert server.auth_headers == [f"Bearer {SENTINEL_KEY}", "Bearer sk-rotated"]
    assert result.score is None and f"{KEY_ENV} is not set" in result.error and client.stats.failed == 1


def test_judge_sees_question_and_answer_but_never_the_gold(server, judge_log):
    reward = JudgeReward(make_client(server))
    rewards = reward(
        prompts=[[{"role": "user", "content": "What is 98764 + 1? End with 'Answer: N'."}]],
        completions=["SCORE 6"],
        question=["What is 98764 + 1?"],
        answer=["98765"],  # the gold column, which TRL passes to every reward
    )
    assert rewards == [0.6]
    sent = json.dumps(server.requests)
    assert "What is 98764 + 1?" in sent and "SCORE 6" in sent and "98765" not in sent
    assert server.requests[0]["model"] == "judge-model" and server.requests[0]["temperature"] == 0.0


def test_concurrency_is_bounded(server, judge_log):
    client = make_client(server, max_concurrency=2)
    results = client.score_many([conversation(f"SCORE {i}") for i in range(8)])
    assert [r.score for r in results] == [float(i) for i in range(8)]  # input order kept
    assert server.max_in_flight == 2  # requests overlap, but never more than two


BAD_SETTINGS = [
    # (keyword arguments, message fragment)
    ({"base_url": "127.0.0.1:8000/v1"}, "must start with http"),  # scheme missing
    ({"model": ""}, "judge model is empty"),  # no model
    ({"api_key_env": "sk-abc123-def"}, "NAME of an environment variable"),  # the key itself instead of its name
    ({"max_concurrency": 0}, "max_concurrency"),  # nothing could run
]


@pytest.mark.parametrize("overrides,message", BAD_SETTINGS)
def test_bad_settings_fail_early_with_the_fix(overrides, message):
    settings = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", **overrides}
    with pytest.raises(ValueError, match=message) as info:
        OpenAIJudgeClient(**settings)
    assert "sk-abc123-def" not in str(info.value)  # not even a key passed by mistake is echoed


SCORES = [
    # (judge reply, parsed score)
    ("8", 8.0),  # bare number
    (" 7.5 \n", 7.5),  # decimal with whitespace
    ("**9**", 9.0),  # markdown bold
    ("9/10", 9.0),  # fraction of ten
    ("Score: 3", 3.0),  # named score
    ("The answer 17 is right. Score: 10", 10.0),  # reasoning first, score last: the number 17 is not the score
    ("I rate it 6 out of 10.", 6.0),  # "out of 10"
    ("rating = 4", 4.0),  # other wording
    ("The answer 17 is right.", None),  # a number that is not a score
    ("Score: 11", None),  # out of range
    ("", None),  # empty reply
    ("-3", None),  # negative
]


@pytest.mark.parametrize("reply,expected", SCORES)
def test_parse_score(reply, expected):
    assert parse_score(reply) == expected


CHECKER = [
    # (completion, reward against gold 17)
    ("4 * 6 = 24 muffins, 24 - 7 = 17.\nAnswer: 17", 1.0),  # worked answer, final line
    ("Answer: 17.", 1.0),  # bare final line with a full stop
    ("**Answer:** 17\n", 1.0),  # markdown and a trailing newline
    ("Answer: 3.", 0.0),  # the short answer the judge loved
    ("Answer: 17\nI hope this helps!", 0.0),  # text after the answer line
    ("The answer is 17", 0.0),  # not an "Answer:" line
    ("#### 17", 0.0),  # GSM8K marker instead of the requested line
    ("Answer: 17 or 18", 0.0),  # hedge
    ("24 - 7 = 17", 0.0),  # right number, no answer line
    ("", 0.0),  # empty
]


@pytest.mark.parametrize("completion,expected", CHECKER)
def test_answer_line_checker(completion, expected):
    assert answer_line_correctness_reward([[{"role": "assistant", "content": completion}]], answer=["17"]) == [expected]


def test_answer_line_checker_gives_none_without_gold():
    assert answer_line_correctness_reward(["Answer: 17"], answer=[None]) == [None]


def test_hf_judge_runs_on_the_tiny_model(tiny_model_dir):
    # the tiny model's replies are garbage; the path (template, generate, decode, parse) must still work
    reward = make_judge_reward("hf", str(tiny_model_dir), max_new_tokens=4, device="cpu")
    assert isinstance(reward.client, HFJudgeClient)
    rewards = reward(prompts=["2+2?"] * 3, completions=["4", "Answer: 4", "five"])
    assert len(rewards) == 3 and all(r is None or 0.0 <= r <= 1.0 for r in rewards)
    stats = reward.client.stats
    assert stats.scored + stats.unparseable == 3 and stats.failed == 0
    assert pickle.loads(pickle.dumps(reward)).client._model is None  # the model is not pickled


# --- log-probability mode ---------------------------------------------------------------------------------------

DISTRIBUTIONS = [
    # (first-position probabilities, probabilities after "1", expected P(score=k) as {k: p}, resolved)
    ({"7": 0.6, "8": 0.4}, {"0": 0.9}, {7: 0.6, 8: 0.4}, True),  # no "1": nothing to split
    ({"1": 0.5, "9": 0.5}, {"0": 0.8}, {1: 0.1, 9: 0.5, 10: 0.4}, True),  # "1" then "0" is 10
    ({"1": 1.0}, {"7": 0.5, "0": 0.25}, {1: 0.25, 10: 0.25}, True),  # "1" then "7" is 17: out of range, dropped
    ({"1": 0.4, "5": 0.6}, None, {1: 0.4, 5: 0.6}, False),  # after "1" unknown: all of it counts as 1, flagged
    ({"10": 0.3, "1": 0.2}, None, {1: 0.2, 10: 0.3}, True),  # "10" is one token: "1" is just 1
    ({"Hello": 0.9, "3": 0.1}, {"0": 1.0}, {3: 0.1}, True),  # other tokens are not scores: mass 0.1
]


@pytest.mark.parametrize("first,after_one,expected,resolved", DISTRIBUTIONS)
def test_score_distribution(first, after_one, expected, resolved):
    from rewards.judge import score_distribution

    probs, was_resolved = score_distribution(first, after_one)
    assert probs == pytest.approx([expected.get(k, 0.0) for k in range(11)])
    assert was_resolved == resolved


LOGPROB_CASES = [
    # (answer the server reacts to, client settings, expected score, stats that must be 1)
    ("LP 7=0.6,8=0.2,_9=0.2", {}, 7.6, "scored"),  # " 9" (a leading space) is the score 9 too
    ("LP 7=0.6,8=0.2,9=0.2", {"logprob_score": "argmax"}, 7.0, "scored"),  # the most likely score
    ("LP 1=0.6,9=0.4|0=0.5,x=0.5", {}, (0.3 + 9 * 0.4 + 10 * 0.3) / 1.0, "scored"),  # "1" then "0": 10
    ("LP 9=0.4,1=0.3", {"logprob_score": "argmax"}, 9.0, "ten_unresolved"),  # "1" not sampled: cannot split it
    ("LP The=0.8,8=0.1", {}, None, "low_mass"),  # 0.1 on the scores, under the 0.5 default
    ("LP The=0.8,8=0.1", {"min_score_mass": 0.05}, 8.0, "scored"),  # the same, with a lower threshold
    ("SCORE 7", {}, None, "failed"),  # a server that returns no log-probabilities: failed, not guessed
]


@pytest.mark.parametrize("answer,settings,score,counted", LOGPROB_CASES, ids=[c[0] for c in LOGPROB_CASES])
def test_logprob_judge_over_http(server, judge_log, answer, settings, score, counted):
    client = make_client(server, mode="logprob", **settings)
    [result] = client.score_many([conversation(answer)])
    assert result.score == (None if score is None else pytest.approx(score))
    assert getattr(client.stats, counted) == 1
    request = server.requests[-1]
    assert request["logprobs"] is True and request["top_logprobs"] == 20 and request["max_tokens"] == 2
    if counted == "low_mass":
        assert "hold 0.1 of the next-token probability" in judge_log.read_text()
    if counted == "failed":
        assert "top_logprobs" in result.error


def test_logprob_judge_reward_logs_mass_metrics(server, judge_log):
    reward = JudgeReward(make_client(server, mode="logprob"))
    metrics = {}
    rewards = reward(prompts=["q"] * 2, completions=["LP 8=0.9", "LP The=0.9,2=0.1"], log_metric=metrics.__setitem__)
    assert rewards == [pytest.approx(0.8), None]
    assert metrics["judge/low_mass_frac"] == 0.5 and metrics["judge/score_mass_mean"] == pytest.approx(0.5)


def _manual_distribution(model, tokenizer, messages):
    """P(score = k) by hand: one unpadded forward per position, digits looked up by encoding them."""
    import torch

    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "Score: "
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    digit = {d: tokenizer.encode(str(d), add_special_tokens=False)[0] for d in range(10)}
    with torch.no_grad():
        first = model(torch.tensor([ids])).logits[0, -1].softmax(-1)
        after_one = model(torch.tensor([ids + [digit[1]]])).logits[0, -1].softmax(-1)
    probs = [first[digit[d]].item() for d in range(10)] + [0.0]
    p_one = probs[1]
    probs[1] = p_one * (1 - sum(after_one[digit[d]].item() for d in range(10)))
    probs[10] = p_one * after_one[digit[0]].item()
    return probs


def test_logprob_judge_on_the_tiny_model_matches_a_forward_pass_by_hand(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # answers of different lengths, so the batch is left-padded: positions must not shift
    answers = ["4", "2 + 2 = 4, so the answer is four.\nAnswer: 4", "five"]
    conversations = [conversation(a) for a in answers]
    client = HFJudgeClient(str(tiny_model_dir), mode="logprob", min_score_mass=0.0, device="cpu", batch_size=3)
    results = client.score_many(conversations)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for result, messages in zip(results, conversations, strict=True):
        expected = _manual_distribution(model, tokenizer, messages)
        assert result.probs == pytest.approx(expected, rel=1e-4, abs=1e-7)
        assert result.mass == pytest.approx(sum(expected), rel=1e-4)
        assert result.score == pytest.approx(sum(k * p for k, p in enumerate(expected)) / sum(expected), rel=1e-4)
    assert client.stats.requests == 1 and client.stats.scored == 3  # one forward pass for the batch
    argmax = HFJudgeClient(str(tiny_model_dir), mode="logprob", logprob_score="argmax", min_score_mass=0.0)
    assert [r.score for r in argmax.score_many(conversations)] == [
        float(max(range(11), key=r.probs.__getitem__)) for r in results
    ]


def test_logprob_judge_with_too_little_mass_gives_none_and_warns(tiny_model_dir, judge_log):
    # an untrained model spreads its mass over 400 tokens: the 0-10 scores hold far less than all of it
    reward = make_judge_reward("hf", str(tiny_model_dir), mode="logprob", min_score_mass=1.0, device="cpu")
    assert reward(prompts=["2+2?"] * 2, completions=["4", "five"]) == [None, None]
    assert reward.client.stats.low_mass == 2 and reward.client.stats.scored == 0
    assert "< min_score_mass 1" in judge_log.read_text()


BAD_MODES = [
    # (settings, message fragment)
    ({"mode": "logprobs"}, "judge mode 'logprobs'"),  # a typo of the mode
    ({"mode": "logprob", "logprob_score": "mean"}, "'expected' or 'argmax'"),  # unknown way to read the score
    ({"mode": "logprob", "min_score_mass": 1.5}, "min_score_mass must be in"),  # not a share of probability
]


@pytest.mark.parametrize("settings,message", BAD_MODES)
def test_bad_judge_modes_fail_before_loading(settings, message):
    with pytest.raises(ValueError, match=message):
        make_judge_reward("hf", "/nonexistent/judge", **settings)  # raises before the (missing) model would load
    with pytest.raises(ValueError, match=message):
        make_judge_reward("openai", "m", "http://127.0.0.1:8000/v1", **settings)


def test_score_tokens_must_be_single_tokens():
    from rewards.judge import score_token_ids

    class SplitsSevens:  # a tokenizer with "7" as two tokens, "10" as one
        def encode(self, text, add_special_tokens=False):
            return {"7": [70, 71], "10": [100]}.get(text, [int(text)])

    with pytest.raises(ValueError, match="splits the score '7' into 2 tokens"):
        score_token_ids(SplitsSevens())


@pytest.mark.slow
def test_logprob_judge_on_smollm2():
    from recipes.real_model import require_real_model

    folder = require_real_model()
    from judge_lab.noise import DEFAULT_SET, LAB_QUESTION
    from rewards.judge import judge_messages

    client = HFJudgeClient(str(folder), mode="logprob", device="cpu", batch_size=len(DEFAULT_SET))
    conversations = [judge_messages(LAB_QUESTION, a) for a in DEFAULT_SET]
    results = client.score_many(conversations)
    # SmolLM2 puts most of its next-token mass on the digits (docs/judge_lab.md): every answer scored, none unparseable
    assert client.stats.as_dict() | {"requests": 0} == {
        "requests": 0,
        "scored": 6,
        "unparseable": 0,
        "low_mass": 0,
        "failed": 0,
        "retries": 0,
        "ten_unresolved": 0,
    }
    assert all(0.0 <= r.score <= 10.0 and 0.5 <= r.mass <= 1.0 for r in results)
    # deterministic: one at a time (no padding) gives the batch's numbers
    alone = [client.score_many([c])[0] for c in conversations[:2]]
    for one, batched in zip(alone, results[:2], strict=False):
        assert one.probs == pytest.approx(batched.probs, abs=1e-4)
