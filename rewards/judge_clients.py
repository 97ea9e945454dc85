"""The LLM judge's clients: they send ``judge_messages`` conversations to a judge and return one verdict each.

The API key is read at each request from the environment variable the config names, and is never logged, pickled or
written to a config; errors are redacted. A judge's failure never raises: the score is None, counted and logged, as is
a score whose tokens hold less than ``min_score_mass`` (renormalised from a sliver it would be noise).
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from rewards.completions import length_batches
from rewards.judge_scores import (
    DEFAULT_MIN_SCORE_MASS,
    LOGPROB_PREFIX,
    check_mode,
    parse_score,
    score_distribution,
    score_from_distribution,
    score_token_ids,
)

logger = logging.getLogger(__name__)

MAX_LOGGED_REPLY_CHARS = 200
LOG_FIRST_N = 20  # unparseable replies logged in full; after that every 100th (all are counted in stats)
TOP_LOGPROBS = 20  # what a server is asked for per position (OpenAI's maximum)


@dataclass
class JudgeResult:
    """One judged answer: ``score`` is None when the reply held no score (``reply`` set), the request failed, or (log-
    probability mode) the score tokens held too little mass. ``probs`` is P(score = k), k = 0..10, in that mode."""

    score: float | None
    reply: str | None = None
    error: str | None = None
    probs: list[float] | None = None
    mass: float | None = None


@dataclass
class JudgeStats:
    """Running counts over a client's life (thread-safe); ``unparseable``, ``low_mass`` and ``failed`` answers got
    reward None, ``ten_unresolved`` ones a "1" that could not be split into 1 and 10."""

    requests: int = 0  # HTTP attempts or forward/generate calls, retries included
    scored: int = 0
    unparseable: int = 0
    low_mass: int = 0
    failed: int = 0
    retries: int = 0
    ten_unresolved: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, int]:
        names = ("requests", "scored", "unparseable", "low_mass", "failed", "retries", "ten_unresolved")
        return {k: getattr(self, k) for k in names}

    def __getstate__(self):
        return self.as_dict()

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _record(stats: JudgeStats, reply: str | None, error: str | None) -> JudgeResult:
    if error is not None:
        stats.add(failed=1)
        logger.warning("judge request failed, reward None (%d failed so far): %s", stats.failed, error)
        return JudgeResult(None, reply, error)
    score = parse_score(reply)
    if score is None:
        stats.add(unparseable=1)
        if stats.unparseable <= LOG_FIRST_N or stats.unparseable % 100 == 0:  # every one counted, not every one shown
            logger.warning(
                "judge reply holds no 0-10 score, reward None (%d unparseable so far): %r",
                stats.unparseable,
                (reply or "")[:MAX_LOGGED_REPLY_CHARS],
            )
    else:
        stats.add(scored=1)
    return JudgeResult(score, reply)


def _record_distribution(
    stats: JudgeStats, probs: list[float], resolved: bool, how: str, min_mass: float
) -> JudgeResult:
    """A log-probability verdict: the score, or None (counted, logged) when the score tokens hold too little mass."""
    mass = sum(probs)
    if not resolved:
        stats.add(ten_unresolved=1)
    if mass <= 0 or mass < min_mass:
        stats.add(low_mass=1)
        if stats.low_mass <= LOG_FIRST_N or stats.low_mass % 100 == 0:
            logger.warning(
                "judge's score tokens 0-10 hold %.3g of the next-token probability (< min_score_mass %g), reward "
                "None (%d so far)",
                mass,
                min_mass,
                stats.low_mass,
            )
        return JudgeResult(None, probs=probs, mass=mass)
    stats.add(scored=1)
    return JudgeResult(score_from_distribution(probs, how), probs=probs, mass=mass)


class OpenAIJudgeClient:
    """Scores answers through an OpenAI-compatible endpoint with the ``openai`` client. ``api_key_env`` NAMES the key's
    variable (None: no Authorization header; ``OPENAI_API_KEY`` is never read in its place).

    >>> client = OpenAIJudgeClient("http://127.0.0.1:8000/v1/", "Qwen/Qwen2.5-7B-Instruct", api_key_env="JUDGE_KEY")
    >>> client.url
    'http://127.0.0.1:8000/v1/chat/completions'
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        *,
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        temperature: float = 0.0,
        max_tokens: int = 16,
        mode: str = "text",
        logprob_score: str = "expected",
        min_score_mass: float = DEFAULT_MIN_SCORE_MASS,
    ):
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"judge base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("judge model is empty: give the model name the endpoint serves (judge_model)")
        if api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env):
            raise ValueError(
                f"api_key_env must be the NAME of an environment variable (like OPENAI_API_KEY), not {len(api_key_env)}"
                " characters that look like a key itself: put the key in the environment and pass its name"
            )
        if max_concurrency < 1 or timeout_s <= 0 or max_retries < 0:
            raise ValueError("judge max_concurrency must be >= 1, timeout_s > 0 and max_retries >= 0")
        check_mode(mode, logprob_score, min_score_mass)
        self.mode, self.logprob_score, self.min_score_mass = mode, logprob_score, min_score_mass
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.stats = JudgeStats()
        self._openai = None  # built at the first request; never pickled (it holds the last key it sent)

    def __repr__(self) -> str:  # no key here: only the variable's name
        mode = "" if self.mode == "text" else f", mode={self.mode!r}"
        return f"OpenAIJudgeClient(url={self.url!r}, model={self.model!r}, api_key_env={self.api_key_env!r}{mode})"

    def __getstate__(self):
        return {**self.__dict__, "_openai": None}

    def _key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""

    def _redact(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "***") if key else text

    def _client(self):
        if self._openai is None:
            import openai  # ~0.6 s to import: paid by the API judge alone, not by every user of rewards

            def count_attempt(request):  # openai numbers its attempts in this header: 0 is the first, 1+ a retry
                self.stats.add(requests=1, retries=int(request.headers.get("x-stainless-retry-count", "0") != "0"))

            self._openai = openai.OpenAI(
                base_url=self.base_url,
                api_key=self._key,  # a callable: the key is read from the environment at each request
                timeout=self.timeout_s,
                max_retries=self.max_retries,
                http_client=openai.DefaultHttpxClient(event_hooks={"request": [count_attempt]}),
            )
        return self._openai

    def _chat(self, messages: list[dict]):
        """(the response's first choice, None) or (None, error description); ``openai`` retries what is worth it."""
        import openai  # as in _client

        if self.api_key_env and not self._key():
            return None, f"{self.api_key_env} is not set: export the judge's API key in it (api_key_env names it)"
        settings = {"max_tokens": self.max_tokens}
        if self.mode == "logprob":  # the score's first token, and the one after it (to tell 1 from 10)
            settings = {"max_tokens": 2, "logprobs": True, "top_logprobs": TOP_LOGPROBS}
        if not self.api_key_env:  # the SDK insists on a key; a local server needs none: send no Authorization
            settings["extra_headers"] = {"Authorization": openai.omit}
        try:
            completion = self._client().chat.completions.create(
                model=self.model, messages=messages, temperature=self.temperature, **settings
            )
            choice = completion.choices[0]
            choice.message.content  # noqa: B018 - a body without it is malformed (AttributeError below)
            return choice, None
        except openai.APITimeoutError:
            error = f"timeout after {self.timeout_s} s from {self.url} ({self.max_retries + 1} attempts)"
        except openai.APIStatusError as e:  # retried first when worth it (429, 5xx)
            error = f"HTTP {e.status_code} from {self.url}: {e.response.text[:200]}"
        except openai.APIConnectionError as e:
            error = f"cannot reach {self.url}: {e.__cause__ or e} ({self.max_retries + 1} attempts)"
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as e:  # 200, but no chat completion
            error = f"malformed chat-completions response from {self.url}: {e.__class__.__name__}: {e}"
        return None, self._redact(error)

    def score_many(self, conversations: list[list[dict]]) -> list[JudgeResult]:
        """Judge each conversation (at most ``max_concurrency`` at once); results in input order, never raises."""
        if not conversations:
            return []

        def one(messages):
            choice, error = self._chat(messages)
            if error is None and self.mode == "logprob":
                try:
                    probs, resolved = score_distribution(*_first_positions(choice.logprobs.content))
                except (AttributeError, IndexError, TypeError, ValueError) as e:
                    error = (
                        f"no top_logprobs in the response from {self.url} ({e.__class__.__name__}): does it serve them?"
                    )
                else:
                    return _record_distribution(self.stats, probs, resolved, self.logprob_score, self.min_score_mass)
            content = choice.message.content if error is None else None
            return _record(self.stats, content if isinstance(content, str) or error else "", error)

        self._client()  # built once, before the threads share it
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(conversations))) as pool:
            return list(pool.map(one, conversations))


def _first_positions(content) -> tuple[dict[str, float], dict[str, float] | None]:
    """From a chat completion's ``logprobs.content``: the score-token probabilities at the first position, and the
    next-token probabilities after a "1" when the reply's first token is "1" (else None)."""

    def probabilities(position) -> dict[str, float]:
        out: dict[str, float] = {}
        for entry in position.top_logprobs:  # " 7" and "7" are both the score 7
            out[entry.token.strip()] = out.get(entry.token.strip(), 0.0) + math.exp(float(entry.logprob))
        return out

    first = probabilities(content[0])
    after_one = probabilities(content[1]) if content[0].token.strip() == "1" and len(content) > 1 else None
    return first, after_one


class HFJudgeClient:
    """Scores answers with a local Hugging Face chat model. ``"logprob"`` mode runs one forward pass over the prompt,
    ``Score: `` and "1": the logits before "1" give the score's first token, those after it split 1 from 10."""

    def __init__(
        self,
        model_name_or_path: str,
        *,
        max_new_tokens: int = 16,
        batch_size: int = 8,
        device=None,
        mode: str = "text",
        logprob_score: str = "expected",
        min_score_mass: float = DEFAULT_MIN_SCORE_MASS,
    ):
        if not model_name_or_path:
            raise ValueError("judge model path is empty: give a local folder or hub id (judge_model)")
        check_mode(mode, logprob_score, min_score_mass)
        self.mode, self.logprob_score, self.min_score_mass = mode, logprob_score, min_score_mass
        self.model_name_or_path = model_name_or_path
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.device = device
        self.stats = JudgeStats()
        self._model = self._tokenizer = None

    def __repr__(self) -> str:
        mode = "" if self.mode == "text" else f", mode={self.mode!r}"
        return f"HFJudgeClient(model={self.model_name_or_path!r}{mode})"

    def __getstate__(self):  # the model is reloaded where it is unpickled
        return {**self.__dict__, "_model": None, "_tokenizer": None}

    def _load(self):
        import torch  # torch, transformers: ~3 s; rewards (and `eval score`) import without them
        from transformers import AutoModelForCausalLM, AutoTokenizer  # as torch

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path, padding_side="left")
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(self.model_name_or_path, dtype=dtype).to(device).eval()
        self._model = model.requires_grad_(False)  # a judge is never trained: its forward passes record no graph
        if self.mode == "logprob":
            self._score_ids = score_token_ids(self._tokenizer)
            # only the last two positions' logits: a [B, L, vocabulary] tensor would be GBs for long answers
            takes = "logits_to_keep" in inspect.signature(model.forward).parameters
            self._last_two = {"logits_to_keep": 2} if takes else {}

    def _score_distributions(self, batch: list[list[dict]]) -> list[tuple[list[float], bool]]:
        """One forward pass over ``<chat template> Score: 1`` for each conversation (left-padded)."""
        tok = self._tokenizer
        one = self._score_ids["1"]
        rows = [
            tok(
                tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) + LOGPROB_PREFIX,
                add_special_tokens=False,
            )["input_ids"]
            + [one]
            for m in batch
        ]
        padded = tok.pad({"input_ids": rows}, return_tensors="pt")  # on the left (the tokenizer's side, from _load)
        ids, mask = padded["input_ids"], padded["attention_mask"]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate does (needed by absolute-position models)
        logits = (
            self._model(
                input_ids=ids.to(self._model.device),
                attention_mask=mask.to(self._model.device),
                position_ids=positions.to(self._model.device),
                **self._last_two,
            )
            .logits[:, -2:]
            .float()
        )  # [B, 2, V]: before "1" (the score's first token), after "1"
        probs = logits.softmax(-1).cpu()
        out = []
        for row in probs:
            first = {t: row[0, i].item() for t, i in self._score_ids.items()}
            after_one = {t: row[1, i].item() for t, i in self._score_ids.items() if len(t) == 1}
            out.append(score_distribution(first, after_one))
        return out

    def score_many(self, conversations: list[list[dict]]) -> list[JudgeResult]:
        """Judge each conversation; a generation error gives failed results, never an exception."""
        if self._model is None:
            self._load()
        results: dict[int, JudgeResult] = {}
        for rows in length_batches([len(str(c)) for c in conversations], self.batch_size):
            batch = [conversations[i] for i in rows]
            self.stats.add(requests=1)
            if self.mode == "logprob":
                try:
                    distributions = self._score_distributions(batch)
                except Exception as e:  # noqa: BLE001 - a judge failure must not stop training
                    found = [_record(self.stats, None, f"forward failed: {e.__class__.__name__}: {e}") for _ in batch]
                else:
                    found = [
                        _record_distribution(self.stats, p, r, self.logprob_score, self.min_score_mass)
                        for p, r in distributions
                    ]
                results.update(zip(rows, found, strict=True))
                continue
            try:
                texts = [
                    self._tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in batch
                ]
                inputs = self._tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                inputs = inputs.to(self._model.device)
                out = self._model.generate(
                    **inputs,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    pad_token_id=self._tokenizer.pad_token_id,
                )
                replies = self._tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
                found = [_record(self.stats, reply, None) for reply in replies]
            except Exception as e:  # noqa: BLE001 - a judge failure must not stop training
                found = [_record(self.stats, None, f"generate failed: {e.__class__.__name__}: {e}") for _ in batch]
            results.update(zip(rows, found, strict=True))
        return [results[i] for i in range(len(conversations))]
