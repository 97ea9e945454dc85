"""The LLM judge's clients: they send ``judge_messages`` conversations to a judge and return one verdict each.

- ``OpenAIJudgeClient``: any OpenAI-compatible ``/v1/chat/completions`` endpoint (``vllm serve``, ``ollama``,
  llama.cpp's server, a hosted API), called with the official ``openai`` client, which does the timeouts, the retries
  with exponential backoff and ``Retry-After``. Base URL and model come from config, and so does the NAME of the
  environment variable that holds the API key: the key itself is read from the environment at each request and is
  never logged, never pickled and never written to a config; errors are redacted. A thread pool bounds the requests
  in flight.
- ``HFJudgeClient``: a local Hugging Face causal LM scoring with ``generate`` (greedy), for users without an endpoint.

Both read the score one of two ways (``mode``, ``rewards.judge_scores``):

- ``"text"`` (the default): the judge writes a reply and ``parse_score`` finds the score in it.
- ``"logprob"``: the judge's next-token distribution over the score tokens is read instead, so there is no reply to
  parse (see ``score_distribution``). Locally: the prompt ends with the assistant turn's prefix ``Score: `` and one
  forward pass (no ``generate``) gives the distribution. Over HTTP: the server is asked for ``top_logprobs`` of the
  reply's first two tokens (vLLM and OpenAI return them). The reward is the expected score (``logprob_score=
  "expected"``) or the most likely one (``"argmax"``). When the score tokens hold less than ``min_score_mass`` of the
  probability (the judge wants to say something else), the score is None, the answer is counted in
  ``stats.low_mass`` and a warning is logged: a score renormalised from a sliver of mass would be noise.

A reply that holds no score, or a request that still fails after its retries, gives the score None and is counted
(``client.stats``) and logged; a client never raises on a judge's failure. Whether an endpoint answers or a local
model can be loaded is checked before any training by the recipe (``recipes.grpo_setup.check_judge``).
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

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
    """Running counts over a client's life; ``unparseable``, ``low_mass`` and ``failed`` answers got reward None.

    ``ten_unresolved`` (log-probability mode over HTTP) counts answers whose "1" could not be split into 1 and 10."""

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
    """Scores answers through an OpenAI-compatible chat-completions endpoint, with the official ``openai`` client.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` (``vllm serve``, ``ollama serve``'s
            ``http://127.0.0.1:11434/v1``, a hosted API).
        model: the model name the server expects.
        api_key_env: NAME of the environment variable holding the key, read at each request; None sends no
            Authorization header (fine for a local vLLM server). ``OPENAI_API_KEY`` is never read in its place.
        max_concurrency: requests in flight at once (a thread pool of this size over one ``openai.OpenAI``).
        timeout_s: per attempt (connect, and each read); a timeout is retried.
        max_retries: retries after the first attempt, done by ``openai``: on 408, 409, 429, 5xx, timeouts and
            connection errors, with exponential backoff (0.5 s doubling up to 8 s, minus up to 25 % jitter) or the
            server's ``Retry-After`` when it asks for at most 2 minutes.
        temperature, max_tokens: sampling settings of the judge (0 = greedy, as a judge is usually run).
        mode: ``"text"`` (parse the reply) or ``"logprob"`` (read ``top_logprobs`` of the reply's first two tokens;
            ``max_tokens`` is then 2). The second position splits "1" into 1 and 10 only when the reply's first
            token IS "1" (a server reports top log-probabilities along the reply it wrote); otherwise "1" counts as
            1 and ``stats.ten_unresolved`` counts it. A tokenizer with "10" as one token (OpenAI's) needs no split.
        logprob_score: ``"expected"`` or ``"argmax"`` score in log-probability mode.
        min_score_mass: below this share of probability on the score tokens the reward is None (logged, counted).

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
    """Scores answers with a local Hugging Face chat model, for users without an endpoint.

    Args:
        model_name_or_path: a local folder or hub id of a chat model with a chat template.
        max_new_tokens: reply length in text mode; a score needs few tokens.
        batch_size: conversations per ``generate`` call or forward pass.
        device: ``"cuda"``, ``"cpu"``, or None for cuda when available.
        mode: ``"text"`` (greedy ``generate``, then ``parse_score``) or ``"logprob"``: the chat template's assistant
            turn plus ``Score: `` and then the token "1", in ONE forward pass; the logits before "1" give the score's
            first token, the logits after it split "1" into 1 and 10 (``score_distribution``). Each of "0".."9"
            must be a single token of the judge's tokenizer (checked at load).
        logprob_score, min_score_mass: as for ``OpenAIJudgeClient``.
    """

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
        results = []
        for start in range(0, len(conversations), self.batch_size):
            batch = conversations[start : start + self.batch_size]
            self.stats.add(requests=1)
            if self.mode == "logprob":
                try:
                    distributions = self._score_distributions(batch)
                except Exception as e:  # noqa: BLE001 - a judge failure must not stop training
                    results += [
                        _record(self.stats, None, f"forward failed: {e.__class__.__name__}: {e}") for _ in batch
                    ]
                else:
                    results += [
                        _record_distribution(self.stats, p, r, self.logprob_score, self.min_score_mass)
                        for p, r in distributions
                    ]
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
                results += [_record(self.stats, reply, None) for reply in replies]
            except Exception as e:  # noqa: BLE001 - a judge failure must not stop training
                results += [_record(self.stats, None, f"generate failed: {e.__class__.__name__}: {e}") for _ in batch]
        return results
