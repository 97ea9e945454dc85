"""A real chat-completions server on 127.0.0.1 (started in a thread) for the judge tests, and their helpers.

The server reads what to do from the answer it is asked to judge (``SCORE 7``, ``SLOW``, ``HTTP500``, ...), records
every request (body, Authorization header and arrival time), and counts requests in flight. The client under test is
the real ``openai`` client, so the tests check what it does on the wire (retries, ``Retry-After``, timeouts, headers),
not what we asked it to do. Used by tests/rewards/test_judge_clients.py, tests/rewards/test_judge.py and the judge
lab's tests; the fixtures ``server`` and ``judge_log`` (tests/conftest.py) start one and capture the log.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rewards.judge_clients import OpenAIJudgeClient

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


def make_client(server, **overrides):
    settings = dict(api_key_env=KEY_ENV, timeout_s=0.3, max_retries=1, max_concurrency=4)
    settings.update(overrides)
    return OpenAIJudgeClient(server.base_url, "judge-model", **settings)


def conversation(answer: str) -> list[dict]:
    from rewards.judge_scores import judge_messages

    return judge_messages("Priya buys four boxes of six muffins and gives away seven. How many are left?", answer)
