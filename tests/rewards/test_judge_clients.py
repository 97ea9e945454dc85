"""The judge's clients (rewards/judge_clients.py): the real ``openai`` client against the chat-completions server of
tests/judge_server.py (retries, ``Retry-After``, timeouts, the key and its redaction, concurrency, log-probability
mode over HTTP), and the local Hugging Face judge on the tiny model.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_judge_clients.py``.
"""

from __future__ import annotations

import pickle
import time

import pytest

from rewards.judge import JudgeReward, make_judge_reward
from rewards.judge_clients import HFJudgeClient, OpenAIJudgeClient
from tests.judge_server import KEY_ENV, SENTINEL_KEY, FakeJudgeServer, conversation, make_client

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


def test_a_local_judge_batches_answers_of_similar_length_and_returns_them_in_order(tiny_model_dir):
    # a batch is padded to its longest answer and attention costs its square: long answers go together
    answers = ["step " * 300 + "Answer: 4", "4", "Let me think. " * 200 + "Answer: 5", "five"]
    conversations = [conversation(a) for a in answers]
    client = HFJudgeClient(str(tiny_model_dir), mode="logprob", min_score_mass=0.0, device="cpu", batch_size=2)
    batches = []
    score = client._score_distributions
    client._score_distributions = lambda batch: batches.append(batch) or score(batch)
    results = client.score_many(conversations)
    assert [sorted(conversations.index(m) for m in b) for b in batches] == [[1, 3], [0, 2]]  # short, then long
    one_at_a_time = HFJudgeClient(str(tiny_model_dir), mode="logprob", min_score_mass=0.0, device="cpu", batch_size=1)
    for result, alone in zip(results, one_at_a_time.score_many(conversations), strict=True):
        assert result.probs == pytest.approx(alone.probs, rel=1e-4, abs=1e-7)


def test_logprob_judge_with_too_little_mass_gives_none_and_warns(tiny_model_dir, judge_log):
    # an untrained model spreads its mass over 400 tokens: the 0-10 scores hold far less than all of it
    reward = make_judge_reward("hf", str(tiny_model_dir), mode="logprob", min_score_mass=1.0, device="cpu")
    assert reward(prompts=["2+2?"] * 2, completions=["4", "five"]) == [None, None]
    assert reward.client.stats.low_mass == 2 and reward.client.stats.scored == 0
    assert "< min_score_mass 1" in judge_log.read_text()


@pytest.mark.slow
def test_logprob_judge_on_smollm2():
    from recipes.real_model import require_real_model

    folder = require_real_model()
    from judge_lab.noise import DEFAULT_SET, LAB_QUESTION
    from rewards.judge_scores import judge_messages

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
