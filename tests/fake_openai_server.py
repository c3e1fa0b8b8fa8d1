"""A small OpenAI-compatible server with seeded faults, for the fault-injection tests (tests/test_faults.py).

It answers `/v1/models` and `/v1/chat/completions` on 127.0.0.1 with text each role of mascot can use (a JSON directive for the
director, a reply for a speaker, a reply plus `Emotion:` line for the simulated user, one scored line per criterion for a judge).
Faults are drawn per request from `faults` (name -> probability), seeded by the request body and how often that body was seen, so a
retry of the same request can succeed and a run is reproducible whatever the order of concurrent requests:

- `error_500`: HTTP 500            - `slow`: the reply after `slow_s` seconds     - `drip`: the body one byte per `drip_s` seconds
- `malformed`: a body that is not JSON   - `empty`: empty content   - `no_choices`: `"choices": []`
- `garbage_directive`: the director answers text naming nobody (a parse failure, not an error)
- `garbage_judge`: the judge answers text with no criterion line (a parse failure, not an error)
- `reply_directive`: the director answers as a persona would, `The Beacon: "..."` (no directive: a parse failure, not an error)
- `outage=(after_n, seconds)`: after `after_n` chat requests, every connection is dropped for `seconds`.

A request with `"stream": true` is answered as server-sent events, a word per chunk (`stream_s` seconds apart), then `data: [DONE]`.

Modes: `think=True` wraps every answer in `<think>…</think>` (a reasoning model whose thinking was not turned off); `refuse=401` (or 403)
answers that status to `/models` and chat requests (`refuse_on`), with a body that echoes the key it was sent (a hostile server).
Every server records what it was sent: `srv.requests` (each chat request body without its messages) and `srv.auth` (a Counter of the
`Authorization` headers seen, on every path), and `srv.roles` the role of each of `srv.requests`. The server honours no output constraint
(vLLM's `structured_outputs`): it answers as above whatever a request carries, as a server that ignores the field does.

`judge_favour={text: points}`: a biased judge: every score of an item whose last message contains `text` is raised by `points` (at most
10); `num_chat` counts the chat requests (a cached judge stage makes none).

Run by hand: `python tests/fake_openai_server.py --port 8011 --fault error_500=0.2`; as the python of a vLLM environment
(`MASCOT_VLLM_PYTHON`, a script that passes vLLM's argv on) it serves `--model` on `--port` and ignores vLLM's other flags.
"""

from __future__ import annotations
import argparse, hashlib, json, re, socket, threading, time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = (
    "error_500",
    "slow",
    "drip",
    "malformed",
    "empty",
    "no_choices",
    "garbage_directive",
    "garbage_judge",
    "reply_directive",
)
MAX_BODY = 4 << 20  # a request larger than this is refused: the server stays bounded whatever a test sends


def role_of(messages: list[dict]) -> str:
    "Which mascot role sent these messages, from its system prompt."
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    if system.startswith("You direct "):
        return "director"
    if "You are a strict, fair judge" in system:
        return "judge"
    if "You are role-playing a person" in system or "You are a participant in the meeting" in system:
        return "user"
    return "speaker"


def _h(*parts) -> int:
    return int(hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def answer(role: str, messages: list[dict], k: int, salt: int) -> str:
    "A well-formed reply of `role` (sample `k`)."
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    if role == "director":
        team = re.findall(r"^- ([^:\n]+):", system.split("Team:", 1)[-1].split("Pick the member", 1)[0], re.M) or [
            "The Anchor"
        ]
        name = team[(salt + k) % len(team)]
        return json.dumps(
            {"agent_name": name, "action": "acknowledge the feeling and ask one question", "tone": "warm"}
        )
    if role == "judge":
        criteria = re.findall(r"^- (\w+): ", system.split("Criteria:", 1)[-1].split("\n\n", 1)[0], re.M)
        return "\n".join(f"{c} (seems fine): {3 + (salt + k + i) % 7}" for i, c in enumerate(criteria))
    if role == "user":
        return f"Thank you, that helps a little ({k}).\nEmotion: hopeful"
    return f"That sounds really hard; I am here with you, and we can take it one step at a time ({k}, {salt % 97})."


def favoured(text: str, messages: list[dict], favour: dict[str, int]) -> str:
    "A judge's lines with `points` added to each score (capped at 10) when the judged item contains a favoured text."
    item = messages[-1].get("content") or ""
    points = sum(p for k, p in favour.items() if k in item)
    if not points:
        return text
    return re.sub(r": (\d+)$", lambda m: f": {min(10, int(m[1]) + points)}", text, flags=re.M)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up mid-reply (its deadline) is expected, not news


class FakeOpenAIServer:
    "`with FakeOpenAIServer(faults={'error_500': 0.3}, seed=1) as srv: ... srv.url ...`; `srv.stats` counts (role, fault) per request."

    def __init__(
        self,
        faults: dict[str, float] | None = None,
        seed: int = 0,
        model: str = "fake-model",
        roles: tuple[str, ...] | None = None,
        slow_s: float = 5.0,
        drip_s: float = 0.3,
        outage: tuple[int, float] | None = None,
        max_requests: int = 20000,
        listed: list[dict] | None = None,
        think: bool = False,
        refuse: int | None = None,
        refuse_on: tuple[str, ...] = ("models", "chat"),
        judge_favour: dict[str, int] | None = None,
        fault_if: str | None = None,
        stream_s: float = 0.0,
    ):
        bad = [f for f in (faults or {}) if f not in FAULTS]
        if bad:
            raise ValueError(f"unknown faults {bad}; known: {FAULTS}")
        self.faults, self.seed, self.model = dict(faults or {}), seed, model
        self.fault_roles = roles  # faults only for these roles (None: every role)
        self.fault_if = fault_if  # faults only for requests whose body holds this text (e.g. one rubric's wording)
        self.listed = listed or [
            {"id": model}
        ]  # the /v1/models entries (vLLM lists a LoRA adapter with "parent": its base)
        self.slow_s, self.drip_s, self.outage, self.max_requests = slow_s, drip_s, outage, max_requests
        self.stream_s = stream_s  # a streamed reply (`stream: true`) sends a word per chunk, this many seconds apart
        self.judge_favour = dict(judge_favour or {})
        self.stats: Counter = Counter()
        self.num_chat = 0
        self._seen: Counter = Counter()
        self._lock = threading.Lock()
        self._outage_until: float | None = None
        self._httpd: ThreadingHTTPServer | None = None
        self.think, self.refuse, self.refuse_on = think, refuse, refuse_on
        self.requests: list[dict] = []  # chat request bodies, less their messages
        self.roles: list[str] = []  # the role that sent each of `requests`
        self.auth: Counter = Counter()  # Authorization headers seen

    def refused(self, handler, path: str) -> bool:
        "Record the request's Authorization header; under `refuse`, answer that status (echoing the key, as a hostile server would)."
        header = handler.headers.get("Authorization") or ""
        with self._lock:
            self.auth[header] += 1
        if self.refuse and path in self.refuse_on:
            body = {"error": {"message": f"invalid key {header!r}", "type": "authentication_error"}}
            handler._send(self.refuse, json.dumps(body).encode())
            return True
        return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def fault_for(self, role: str, body: bytes) -> str | None:
        with self._lock:
            self._seen[body] += 1
            nth = self._seen[body]
        if self.fault_roles is not None and role not in self.fault_roles:
            return None
        if self.fault_if is not None and self.fault_if.encode() not in body:
            return None
        x = (_h(self.seed, hashlib.sha256(body).hexdigest(), nth) % 10**6) / 10**6
        for name, p in self.faults.items():  # disjoint slices of [0, 1): at most one fault per request
            if x < p:
                return name
            x -= p
        return None

    def in_outage(self) -> bool:
        if not self.outage:
            return False
        with self._lock:
            if self._outage_until is None and self.num_chat >= self.outage[0]:
                self._outage_until = time.time() + self.outage[1]
            return self._outage_until is not None and time.time() < self._outage_until

    def start(self, port: int = 0) -> "FakeOpenAIServer":
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code: int, payload: bytes, drip: float = 0.0):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if not drip:
                    self.wfile.write(payload)
                    return
                for i in range(len(payload)):
                    self.wfile.write(payload[i : i + 1])
                    self.wfile.flush()
                    time.sleep(drip)

            def _stream(self, text: str, count: int):
                "The reply as server-sent events, a word per chunk, as vLLM streams one."
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                words = re.findall(r"\S+\s*", text) or [""]
                try:
                    for i, w in enumerate(words):
                        end = "stop" if i == len(words) - 1 else None
                        choice = {"index": 0, "delta": {"content": w}, "finish_reason": end}
                        chunk = {"id": f"chatcmpl-{count}", "object": "chat.completion.chunk", "model": srv.model}
                        self.wfile.write(f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(srv.stream_s)
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up

            def do_GET(self):
                if srv.refused(self, "models"):
                    return
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(
                        200,
                        json.dumps(
                            {
                                "object": "list",
                                "data": [{"object": "model", "owned_by": "fake", **e} for e in srv.listed],
                            }
                        ).encode(),
                    )
                self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n > MAX_BODY:
                    self.close_connection = True
                    return self._send(413, b'{"error": {"message": "too large"}}')
                body = self.rfile.read(n)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, b'{"error": {"message": "not found"}}')
                if srv.refused(self, "chat"):
                    return
                with srv._lock:
                    srv.num_chat += 1
                    count = srv.num_chat
                if count > srv.max_requests:
                    return self._send(429, b'{"error": {"message": "request budget of the fake server spent"}}')
                if srv.in_outage():
                    srv.stats[("?", "outage")] += 1
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # the server is gone: no reply at all
                    return
                try:
                    req = json.loads(body)
                except json.JSONDecodeError:
                    return self._send(400, b'{"error": {"message": "request body is not JSON"}}')
                if req.get("model") != srv.model:
                    return self._send(
                        404, json.dumps({"error": {"message": f"model {req.get('model')!r} does not exist"}}).encode()
                    )
                role = role_of(req["messages"])
                with srv._lock:
                    srv.requests.append({k: v for k, v in req.items() if k != "messages"})
                    srv.roles.append(role)
                fault = srv.fault_for(role, body)
                srv.stats[(role, fault)] += 1
                if fault == "error_500":
                    return self._send(500, b'{"error": {"message": "injected failure"}}')
                if fault == "malformed":
                    return self._send(200, b'{"id": "x", "choices": [{"message": {"content": "trunc')
                if fault == "slow":
                    time.sleep(srv.slow_s)
                salt = _h(srv.seed, req.get("seed"), json.dumps(req["messages"]))
                texts = [answer(role, req["messages"], k, salt) for k in range(int(req.get("n") or 1))]
                if role == "judge" and srv.judge_favour:
                    texts = [favoured(t, req["messages"], srv.judge_favour) for t in texts]
                if fault == "empty":
                    texts = ["" for _ in texts]
                if fault == "garbage_directive" and role == "director":
                    texts = ["banana " * 5 for _ in texts]
                if fault == "reply_directive" and role == "director":
                    texts = [
                        'The Beacon: "I\'m so sorry to hear that. You are stronger than you think."' for _ in texts
                    ]
                if fault == "garbage_judge" and role == "judge":
                    texts = ["All good, ten out of ten!" for _ in texts]
                if srv.think:
                    texts = [
                        f"<think>The {role} should weigh this carefully ({k}).</think>\n\n{t}"
                        for k, t in enumerate(texts)
                    ]
                if req.get("stream") and len(texts) == 1 and fault != "no_choices":
                    return self._stream(texts[0], count)
                choices = (
                    []
                    if fault == "no_choices"
                    else [
                        {"index": k, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                        for k, t in enumerate(texts)
                    ]
                )
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-{count}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": srv.model,
                        "choices": choices,
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                ).encode()
                try:
                    self._send(200, payload, drip=srv.drip_s if fault == "drip" else 0.0)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its deadline): expected

        self._httpd = _QuietServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--fault", action="append", default=[], help="name=probability, e.g. error_500=0.2 (repeatable)")
    a, _ = p.parse_known_args()  # started as vLLM would be (MASCOT_VLLM_PYTHON): its other flags are ignored
    srv = FakeOpenAIServer({k: float(v) for k, v in (f.split("=") for f in a.fault)}, seed=a.seed, model=a.model).start(
        a.port
    )
    print(srv.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        srv.stop()
