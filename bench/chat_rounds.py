"""Chat rounds as a person at the web page waits for them: `mascot chat --web` at its default settings (so with the trained adapters of
the latest finished run under `runs/`, e.g. the demo's `runs/smoke`), started as a subprocess on 127.0.0.1 on a free port; the page's
first read (`GET /api/state`, which starts the conversation), then `--messages` messages posted in a row to the streaming endpoint
`POST /api/message/stream`, each after the previous round ended. Per round, from the moment the message is posted: the wall time to the
round's last event (`done` or `error`), the time to the director's choice (the first `director` event) and the time to the first words
of the reply (the first `text` event), read from the server-sent events as they arrive.

    python bench/chat_rounds.py [--messages 3] [--round-timeout 300] [--out bench/results/chat_rounds.json]

Writes bench/results/chat_rounds.json: the machine, commit, date and 1-minute load average before and after, the settings, the models
the chat answered with (its header lines), per-round figures, the medians, and the goals for a human study (median round <= 12 s, first
words <= 3 s after posting, both on an idle machine) with whether they were met. Prints one summary line; exits 1 if no round completed.
The server is stopped by SIGTERM to its PID; its conversation is saved in a temporary folder and deleted with it.
"""

import argparse, json, os, platform, signal, statistics, subprocess, sys, tempfile, time
from datetime import datetime, timezone
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
GOAL_MEDIAN_ROUND_S, GOAL_FIRST_WORDS_S = 12.0, 3.0
MESSAGES = [  # the person's side of a short support conversation (the default dataset, ED); cycled past three
    "I had a really rough day at work today.",
    "My manager criticised my report in front of the whole team.",
    "I don't know how to face them all tomorrow morning.",
]


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=3, help="messages posted in a row, one round each")
    ap.add_argument(
        "--round-timeout", type=float, default=300.0, help="seconds a round may take before it counts as failed"
    )
    ap.add_argument("--start-timeout", type=float, default=300.0, help="seconds the server may take to answer")
    ap.add_argument("--out", default="bench/results/chat_rounds.json")
    return ap.parse_args()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), platform.processor()
    )
    from mascot.llm.embedded_weights import embedded_dtype

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "avx512_bf16": "avx512_bf16" in info,
        "embedded_dtype": embedded_dtype(),
    }


def chat_defaults() -> dict:
    "The flags of `mascot chat` that shape a round, at their defaults."
    from mascot.studies.chat_config import ChatConfig

    c = ChatConfig()
    keys = ["system", "dataset", "runs_dir", "agent_turns", "director_temperature", "speaker_temperature"]
    keys += ["director_max_tokens", "speaker_max_tokens", "seed", "model_name"]
    return {k: getattr(c, k) for k in keys}


def git(*a) -> str:
    return subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def start_server(port: int, out: Path, log: Path, timeout: float) -> tuple[subprocess.Popen, float]:
    "`mascot chat --web` on 127.0.0.1:`port`, its defaults otherwise; the process and the seconds until `GET /` answered."
    cmd = [sys.executable, "-m", "mascot.cli", "chat", "--web", "--port", str(port), "--output-dir", str(out)]
    t0 = time.perf_counter()
    with open(log, "w") as f:  # the server writes to its own copy of the file descriptor
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"chat_rounds: the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            requests.get(url, timeout=2)
            return proc, time.perf_counter() - t0
        except requests.RequestException:
            time.sleep(0.25)
    stop_server(proc)
    sys.exit(f"chat_rounds: the server did not answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> float:
    "SIGTERM to the server's PID (the round in progress finishes, the conversation is saved); seconds until it exited."
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return time.perf_counter() - t0


def sse(resp):
    "(event, data) pairs of a server-sent-events response, as they arrive."
    kind, data = "message", ""
    for line in resp.iter_lines(decode_unicode=True):
        if line == "":
            if data:
                yield kind, json.loads(data)
            kind, data = "message", ""
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data += line[6:]


def one_round(base: str, text: str, timeout: float) -> dict:
    """Post `text` to the streaming endpoint; the times (s after posting) of what arrived: the round's, and per director -> speaker
    step the director's choice, the reply's first and last piece and its finished turn."""
    r = {"message": text, "status": None, "wall_s": None, "director_s": None, "first_words_s": None}
    events, steps, t0 = [], [], time.perf_counter()
    try:
        with requests.post(f"{base}/api/message/stream", json={"text": text}, stream=True, timeout=timeout) as resp:
            r["headers_s"] = round(time.perf_counter() - t0, 3)
            if resp.status_code != 200:
                r.update(status="http_error", detail=f"{resp.status_code} {resp.text[:300]}")
                return r
            for kind, d in sse(resp):
                t = round(time.perf_counter() - t0, 3)
                if t > timeout:
                    raise TimeoutError(f"no end after {timeout:.0f} s")
                if kind == "director":
                    r["director_s"] = r["director_s"] or t
                    steps.append({"director_s": t, "speaker": d.get("agent_name"), "fallback": d.get("fallback")})
                elif kind == "text":
                    r["first_words_s"] = r["first_words_s"] or t
                    if not steps or "turn_s" in steps[-1]:  # a system without a director: a step begins with its reply
                        steps.append({})
                    st = steps[-1]
                    st.setdefault("first_words_s", t)
                    st["last_piece_s"], st["pieces"] = t, st.get("pieces", 0) + 1
                elif kind == "turn" and not d.get("user"):
                    if not steps or "turn_s" in steps[-1]:
                        steps.append({})
                    steps[-1].update(turn_s=t, name=d.get("name"), words=len((d.get("text") or "").split()))
                if kind != "text":  # the pieces of a reply are summed up in `steps`
                    events.append([t, kind])
                if kind in ("done", "error"):
                    r.update(status=kind, wall_s=t)
                    if kind == "error":
                        r["detail"] = d.get("detail")
                    break
    except (requests.RequestException, TimeoutError, ValueError) as e:
        r.update(status="failed", detail=f"{type(e).__name__}: {e}")
    if r["status"] is None:
        r.update(status="failed", detail="the stream ended without done or error")
    r["steps"], r["events"] = steps, events
    return r


def main():
    a = parse()
    load_before = os.getloadavg()[0]
    prov = {"machine": machine(), "commit": git("rev-parse", "--short", "HEAD")}
    prov["working_tree_clean"] = not git("status", "--porcelain", "--untracked-files=no")
    prov["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prov["load_average_1min_before"] = round(load_before, 2)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="chat_rounds-") as tmp:
        tmp, port = Path(tmp), free_port()
        log = tmp / "server.log"
        proc, up_s = start_server(port, tmp / "chat", log, a.start_timeout)
        base = f"http://127.0.0.1:{port}"
        try:
            t0 = time.perf_counter()
            # the page's first read, which starts the conversation
            st = requests.get(f"{base}/api/state", timeout=a.start_timeout)
            state_s = time.perf_counter() - t0
            st.raise_for_status()
            for i in range(a.messages):
                rounds.append({"round": i + 1, **one_round(base, MESSAGES[i % len(MESSAGES)], a.round_timeout)})
                rr = rounds[-1]
                print(
                    f"  round {i + 1}: {rr['status']}, wall {rr['wall_s']} s, director {rr['director_s']} s, "
                    f"first words {rr['first_words_s']} s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            stop_s = stop_server(proc)
        header = [
            l.strip() for l in log.read_text().splitlines() if l.strip() and not l.startswith(("INFO", "WARNING"))
        ][:12]
    prov["load_average_1min_after"] = round(os.getloadavg()[0], 2)

    done = [r for r in rounds if r["status"] == "done"]

    def med(k):
        xs = [r[k] for r in done if r[k] is not None]
        return round(statistics.median(xs), 2) if xs else None

    median_round, median_first = med("wall_s"), med("first_words_s")
    median_director = med("director_s")
    res = {
        "provenance": prov,
        "settings": {
            "command": "python -m mascot.cli chat --web --port <free port> --output-dir <temporary folder>",
            "defaults": "every other flag at its default (below); no adapter flag: the adapters of the latest finished run "
            "under runs_dir, as the header says",
            "chat_defaults": chat_defaults(),
            "messages": a.messages,
            "endpoint": "POST /api/message/stream (server-sent events), one message after the previous round's last event",
            "first_read": "GET /api/state once before the first message, as the page does (starts the conversation)",
            "timing": "seconds after posting, measured by the client: wall to done/error, director to the first director "
            "event, first words to the first text event",
            "round_timeout_s": a.round_timeout,
        },
        "server": {
            "header": header,
            "seconds_until_answering": round(up_s, 2),
            "first_state_read_s": round(state_s, 2),
            "sigterm_to_exit_s": round(stop_s, 2),
            "exit_status": proc.returncode,
        },
        "rounds": rounds,
        "rounds_completed": len(done),
        "median_round_s": median_round,
        "median_director_s": median_director,
        "median_first_words_s": median_first,
        "goals": {
            "median_round_s": GOAL_MEDIAN_ROUND_S,
            "first_words_s": GOAL_FIRST_WORDS_S,
            "condition": "idle machine",
            "median_round_met": median_round is not None and median_round <= GOAL_MEDIAN_ROUND_S,
            "first_words_met": median_first is not None and median_first <= GOAL_FIRST_WORDS_S,
            "idle": load_before <= 0.5 and prov["load_average_1min_after"] <= 0.5,
        },
    }
    out = ROOT / a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
    print(
        f"chat_rounds: {len(done)}/{a.messages} rounds; median round {median_round} s (goal <= {GOAL_MEDIAN_ROUND_S:g}: "
        f"{'met' if res['goals']['median_round_met'] else 'not met'}), median first words {median_first} s "
        f"(goal <= {GOAL_FIRST_WORDS_S:g}: {'met' if res['goals']['first_words_met'] else 'not met'}), median director "
        f"{median_director} s; load {prov['load_average_1min_before']} -> {prov['load_average_1min_after']}; {a.out}"
    )
    if not done:
        sys.exit(1)


if __name__ == "__main__":
    main()
