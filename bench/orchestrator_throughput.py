"""Chat calls per second the orchestrator's client makes on one core against a server that answers at once, tracing off.

`LLMClient.chat('speaker', ...)` with a run record (the usage counters every stage keeps), `--concurrency` requests in flight, against a
local HTTP/1.1 server that returns a canned chat completion without reading the request (an asyncio protocol in another process, pinned
to another core where there is one). The client's process is pinned to one core. Two code paths run in one process, interleaved, each
repetition in alternating order: `before`, the `mascot` package of `--before` (a git revision, extracted under another package name),
and `after`, this checkout's. Each repetition reports calls per wall-clock second and calls per CPU-second of the client's process (the
second is the client's own cost; the first also waits on the server and on whatever else the machine runs). cProfile of one more run of
each splits the client's time by where it goes: request building and reply parsing, JSON, the HTTP client, asyncio and the socket
calls, the run record.

    python bench/orchestrator_throughput.py [--calls 3000] [--reps 7] [--before 6766bb6]

Writes bench/results/orchestrator_throughput.json.
"""

import argparse, asyncio, cProfile, importlib, json, os, platform, pstats, re, shutil, statistics, subprocess, sys, tarfile
import tempfile, time
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "orchestrator_throughput.json"
BEFORE = "6766bb6"  # the last commit whose client went through the openai package's AsyncOpenAI
MODEL = "bench-model"

SERVER = r"""
import asyncio, json, os, re, sys
body = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "%(model)s",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "That sounds hard; I am here with you, one step at a time."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 412, "completion_tokens": 14, "total_tokens": 426}}).encode()
models = json.dumps({"object": "list", "data": [{"id": "%(model)s", "object": "model", "owned_by": "bench"}]}).encode()
reply = lambda b: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %%d\r\n\r\n" %% len(b) + b
CHAT, MODELS, LENGTH = reply(body), reply(models), re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")
class Instant(asyncio.Protocol):
    def connection_made(self, t): self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            m = LENGTH.search(self.buf, 0, end + 2)
            size = end + 4 + (int(m[1]) if m else 0)
            if len(self.buf) < size: return
            get, self.buf = self.buf.startswith(b"GET"), self.buf[size:]
            self.t.write(MODELS if get else CHAT)
async def main():
    srv = await asyncio.get_running_loop().create_server(Instant, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
if len(sys.argv) > 1: os.sched_setaffinity(0, {int(sys.argv[1])})
asyncio.run(main())
"""

# a director-sized prompt: a persona's system prompt and a few turns of a conversation
MESSAGES = [
    {"role": "system", "content": "You are The Anchor, a calm and steady member of a support team. " * 12},
    {"role": "user", "content": "I failed my exam and my parents will be angry when they find out."},
    {"role": "assistant", "content": "That sounds really hard. Do you want to tell me what happened on the day?"},
    {"role": "user", "content": "I froze on the first question and never recovered; I had studied for weeks."},
]


def provenance() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if l.startswith("model name")), platform.processor()
    )
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": os.getloadavg()[0],
        },
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_files": len(git("status", "--porcelain", "--", "mascot").splitlines()),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def package_at(rev: str, into: Path) -> str:
    "The `mascot` package as it was at `rev`, importable as `mascot_<rev>` (its imports within the package are relative)."
    name = "mascot_" + re.sub(r"\W", "_", rev)
    raw = subprocess.run(["git", "archive", rev, "mascot"], capture_output=True, cwd=ROOT, check=True).stdout
    with tarfile.open(fileobj=BytesIO(raw)) as t:
        t.extractall(into / "x")
    shutil.move(into / "x" / "mascot", into / name)
    sys.path.insert(0, str(into))
    return name


def client_of(pkg: str, url: str, concurrency: int, run_path: Path):
    client = importlib.import_module(f"{pkg}.llm.client")
    routing = importlib.import_module(f"{pkg}.llm.routing")
    runtime = importlib.import_module(f"{pkg}.core.runtime")
    cfg = routing.EndpointConfig(vllm_server_url=url, model_name=MODEL, max_concurrency=concurrency)
    return client.LLMClient(cfg, run=runtime.RunDir(run_path, {"bench": pkg}))


async def calls(pkg: str, url: str, n: int, concurrency: int, run_path: Path) -> dict:
    "`n` speaker calls through `pkg`'s client, all issued at once (its semaphore keeps `concurrency` in flight)."
    c = client_of(pkg, url, concurrency, run_path)
    await c.check()
    await asyncio.gather(
        *[c.chat("speaker", MESSAGES, temperature=0.7, max_tokens=64) for _ in range(50)]
    )  # warm connections
    t0, c0 = time.perf_counter(), time.process_time()
    replies = await asyncio.gather(
        *[c.chat("speaker", MESSAGES, temperature=0.7, max_tokens=64, seed=i) for i in range(n)]
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert all(r.texts[0].startswith("That sounds hard") for r in replies) and c.run.roles["speaker"]["calls"] == n + 50
    await c.aclose()
    return {
        "calls_per_s": round(n / wall, 1),
        "calls_per_cpu_s": round(n / cpu, 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
    }


CATEGORIES = (  # (category, patterns of the profiled function's file or built-in name)
    ("run record", ("core/runtime.py",)),
    (
        "request building and reply parsing",
        ("/llm/", "/openai/", "pydantic", "typing.py", "dataclasses.py", "typing_extensions"),
    ),
    ("JSON", ("json",)),
    (
        "HTTP client",
        (
            "httpx",
            "httpcore",
            "h11",
            "anyio",
            "sniffio",
            "aiohttp",
            "yarl",
            "multidict",
            "propcache",
            "http/",
            "email/",
            "urllib",
        ),
    ),
    (
        "asyncio and sockets",
        ("asyncio", "selectors", "socket", "select", "epoll", "events.py", "_contextvars", "Future", "Task"),
    ),
)


def profile(pkg: str, url: str, n: int, concurrency: int, run_path: Path) -> dict:
    "Where one run's time goes: cProfile's own time per function, summed by category (its share, and microseconds per call as profiled)."
    pr = cProfile.Profile()
    pr.enable()
    asyncio.run(calls(pkg, url, n, concurrency, run_path))
    pr.disable()
    by: dict[str, float] = {}
    for (file, _, func), (_, _, own, _, _) in pstats.Stats(pr).stats.items():
        where = file if file != "~" else func
        cat = next((c for c, pats in CATEGORIES if any(p in where for p in pats)), "other")
        by[cat] = by.get(cat, 0.0) + own
    total = sum(by.values())
    return {
        "profiled_us_per_call": round(total / (n + 50) * 1e6),
        "share": {k: round(v / total, 3) for k, v in sorted(by.items(), key=lambda kv: -kv[1])},
    }


def summary(runs: list[dict], key: str) -> dict:
    xs = [r[key] for r in runs]
    return {"median": round(statistics.median(xs), 1), "min": min(xs), "max": max(xs)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000, help="timed calls per repetition")
    p.add_argument("--reps", type=int, default=7, help="repetitions of each code path, interleaved")
    p.add_argument("--concurrency", type=int, default=16, help="--max-concurrency of the client (the stages' default)")
    p.add_argument("--before", default=BEFORE, help="the git revision of the code path to compare with")
    p.add_argument("--out", default=str(OUT))
    a = p.parse_args()
    prov = provenance()
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_core = cores[0], cores[-1]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER % {"model": MODEL}, str(server_core)], stdout=subprocess.PIPE, text=True
    )
    tmp = Path(tempfile.mkdtemp(prefix="orchestrator_bench_"))
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/v1"
        os.sched_setaffinity(0, {client_core})
        paths = {"before": package_at(a.before, tmp), "after": "mascot"}
        sys.path.insert(0, str(ROOT))
        runs = {k: [] for k in paths}
        for rep in range(a.reps):
            for k in list(paths) if rep % 2 == 0 else list(paths)[::-1]:
                r = asyncio.run(calls(paths[k], url, a.calls, a.concurrency, tmp / f"{k}{rep}"))
                runs[k].append(r)
                print(
                    f"rep {rep} {k:6s} {r['calls_per_s']:8.1f} calls/s  {r['calls_per_cpu_s']:8.1f} calls/CPU-s",
                    flush=True,
                )
        profiles = {k: profile(pkg, url, a.calls // 2, a.concurrency, tmp / f"{k}-profile") for k, pkg in paths.items()}
    finally:
        server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    prov["machine"]["load_average_at_end"] = os.getloadavg()[0]
    res = {
        "provenance": prov,
        "setup": {
            "calls_per_rep": a.calls,
            "reps": a.reps,
            "concurrency": a.concurrency,
            "client_core": client_core,
            "server_core": server_core,
            "before": a.before,
            "after": prov["commit"] + (" + uncommitted changes" if prov["uncommitted_files"] else ""),
            "tracing": False,
            "server": "asyncio protocol returning a canned completion, another process",
        },
        "runs": runs,
        "summary": {k: {m: summary(v, m) for m in ("calls_per_s", "calls_per_cpu_s")} for k, v in runs.items()},
        "profile": profiles,
    }
    s = res["summary"]
    res["ratio_after_over_before"] = {
        m: round(s["after"][m]["median"] / s["before"][m]["median"], 2) for m in ("calls_per_s", "calls_per_cpu_s")
    }
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({"summary": s, "ratio": res["ratio_after_over_before"], "profile": profiles}, indent=1))


if __name__ == "__main__":
    main()
