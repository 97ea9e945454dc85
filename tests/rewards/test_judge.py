"""The LLM-judge reward (rewards/judge.py): ``score / 10``, None (not 0) for a judge's failure, the metrics it logs,
what the judge is shown, and the checks of ``make_judge_reward``. The judge is the chat-completions server of
tests/judge_server.py.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/rewards/test_judge.py``.
"""

from __future__ import annotations

import json

import pytest

from rewards.judge import JudgeReward, make_judge_reward
from tests.judge_server import make_client


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


def test_logprob_judge_reward_logs_mass_metrics(server, judge_log):
    reward = JudgeReward(make_client(server, mode="logprob"))
    metrics = {}
    rewards = reward(prompts=["q"] * 2, completions=["LP 8=0.9", "LP The=0.9,2=0.1"], log_metric=metrics.__setitem__)
    assert rewards == [pytest.approx(0.8), None]
    assert metrics["judge/low_mass_frac"] == 0.5 and metrics["judge/score_mass_mean"] == pytest.approx(0.5)


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
