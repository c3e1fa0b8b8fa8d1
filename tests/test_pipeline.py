"`mascot run`: config errors before any work, kill + --resume without redoing completed stages, and the results site in headless Chromium."

import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
import yaml
from mascot.core.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]


def mascot(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "mascot.pipeline.run", *args],
        capture_output=True,
        text=True,
        cwd=kw.pop("cwd", ROOT),
        **kw,
    )


TINY = {
    "run_name": "tiny",
    "dataset": "ED",
    "data_path": "demo:empathetic_dialogues",
    "seed": 0,
    "endpoints": {"judge_provider": "embedded"},
    # score_margin 0: the tiny judge's scores sit close together, and the test is about the pipeline, not the data
    "stages": {
        "candidates": {
            "split": "train",
            "num_samples": 4,
            "num_candidates": 3,
            "personas": ["The Anchor"],
            "max_tokens": 24,
            "score_margin": 0.0,
            "judge_examples": 1,
            "judge_max_tokens": 100,
        },
        "reward_model": {"num_train_epochs": 1, "lora_r": 4, "max_length": 640, "holdout_fraction": 0.34},
    },
}


def write_cfg(tmp_path, cfg, name="c.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_misspelt_key_stops_before_any_work(tmp_path):
    bad = json.loads(json.dumps(TINY))
    bad["stages"]["candidates"]["num_candidatez"] = 3
    r = mascot(str(write_cfg(tmp_path, bad)), "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode != 0 and "unknown key 'num_candidatez'" in r.stderr and "stages.candidates" in r.stderr
    assert not (tmp_path / "runs").exists()
    bad = {**TINY, "stagez": {}}
    r = mascot(str(write_cfg(tmp_path, bad)), "--runs-dir", str(tmp_path / "runs"))
    assert "unknown key 'stagez'" in r.stderr and not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_missing_input_path_stops_before_any_work(tmp_path):
    cfg = {**TINY, "stages": {"reward_model": {"data_path": str(tmp_path / "no-such-pairs")}}}
    r = mascot(str(write_cfg(tmp_path, cfg)), "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode != 0 and "no-such-pairs does not exist" in r.stderr and not (tmp_path / "runs").exists()


def test_missing_strategy_file_stops_before_any_work(tmp_path):
    "The director warm start's human data is the user's file: a path that does not exist stops the run before its first stage."
    cfg = {**TINY, "stages": {"director_sft": {"strategy_path": str(tmp_path / "no-such-ESConv.json")}}}
    r = mascot(str(write_cfg(tmp_path, cfg)), "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode != 0 and "no-such-ESConv.json does not exist" in r.stderr and not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_interrupt_then_resume_skips_completed_stages(tmp_path):
    cfg = write_cfg(tmp_path, TINY)
    runs = (
        tmp_path / "runs"
    )  # given as the relative "runs", as `make demo` does: every stage must still write inside it
    # the tiny random model, as make test-fast runs it: what is asserted is which stages are kept, redone and where they write
    tiny = {**os.environ, "MASCOT_TINY_MODEL": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "mascot.pipeline.run", str(cfg), "--runs-dir", "runs"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=tiny,
    )
    rm_summary, deadline = runs / "tiny" / "11_reward_model" / "run_summary.json", time.time() + 900
    while time.time() < deadline and not rm_summary.exists() and p.poll() is None:
        time.sleep(0.5)
    assert rm_summary.exists(), (
        p.stdout.read().decode()[-3000:] if p.poll() is not None else "reward_model never started"
    )
    time.sleep(3)  # in the middle of the reward-model stage
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    cand = runs / "tiny" / "10_candidates"
    assert json.loads((cand / "run_summary.json").read_text())["status"] == "completed"
    assert json.loads(rm_summary.read_text())["status"] == "running"  # killed mid-stage
    before = (cand / "executed.ipynb").stat().st_mtime_ns
    r = mascot(str(cfg), "--runs-dir", "runs", "--resume", timeout=900, cwd=tmp_path, env=tiny)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[candidates] completed earlier: skipped" in r.stdout
    assert (cand / "executed.ipynb").stat().st_mtime_ns == before  # not redone
    assert json.loads(rm_summary.read_text())["status"] == "completed"
    out = json.loads((runs / "tiny" / "11_reward_model" / "outputs.json").read_text())
    assert Path(out["path"], "mascot_metadata.json").exists()
    assert Path(out["path"]).is_relative_to(runs / "tiny" / "11_reward_model" / "out"), out[
        "path"
    ]  # not nested under the stage's working dir
    # a run folder with stages is not clobbered without --resume
    r = mascot(str(cfg), "--runs-dir", str(runs), env=tiny)
    assert r.returncode != 0 and "--resume" in r.stderr


@pytest.mark.integration
def test_failing_stage_keeps_notebook_and_names_error(tmp_path):
    cfg = {
        **TINY,
        "stages": {
            "candidates": {
                **TINY["stages"]["candidates"],
                "judge_server_url": "http://127.0.0.1:9/v1",
                "judge_provider": None,
                "max_retries": 0,
            }
        },
    }
    r = mascot(str(write_cfg(tmp_path, cfg)), "--runs-dir", str(tmp_path / "runs"), timeout=600)
    assert r.returncode == 1
    assert "stage candidates failed" in r.stderr and "unreachable" in r.stderr
    sdir = tmp_path / "runs" / "tiny" / "10_candidates"
    assert (sdir / "executed.ipynb").exists() and json.loads((sdir / "run_summary.json").read_text())[
        "status"
    ] == "failed"
    # which judge the stage was to use, and where: in its meta.json and run_config.json
    route = {
        "provider": "vllm",
        "model": None,
        "url": "http://127.0.0.1:9/v1",
        "where": "served",
    }  # None: no --judge, and the server is down
    assert (
        json.loads((sdir / "meta.json").read_text())["judge_route"]
        == route
        == json.loads((sdir / "run_config.json").read_text())["judge_route"]
    )


@pytest.mark.integration
def test_plan_checks_everything_and_runs_nothing(tmp_path):
    """`mascot run configs/paper-ed.yaml --plan` with its endpoints set and `data_path` on local files: every stage listed with Qwen3-8B, and on
    a machine without a GPU each training stage named with the GPU memory it needs; exit 2, no folder created (it loads no model; its wall
    time is not asserted)."""
    from fake_openai_server import FakeOpenAIServer
    from mascot.domain.datasets import demo_data_dir

    cfg = read_yaml(ROOT / "configs/paper-ed.yaml")
    cfg["data_path"] = str(demo_data_dir() / "empathetic_dialogues")
    with FakeOpenAIServer(model="Qwen/Qwen3-8B") as srv:
        env = {**os.environ, "VLLM_SERVER_URL": srv.url, "JUDGE_SERVER_URL": srv.url, "JUDGE_MODEL": "Qwen/Qwen3-8B"}
        r = mascot(str(write_cfg(tmp_path, cfg)), "--plan", "--runs-dir", str(tmp_path / "runs"), env=env, timeout=300)
    out = r.stdout
    assert not (tmp_path / "runs").exists(), out
    stages = [s for s in cfg["stages"]]
    listed = [
        l.split()[0]
        for l in out.splitlines()[1:]
        if l and not l.startswith((" ", "-", "reproducibility:", "warning:", "GPU-hours")) and "problem" not in l
    ]
    assert listed == stages, out
    assert all(
        "Qwen/Qwen3-8B" in l
        for l in out.splitlines()
        if l.split(" ")[0] in ("candidates", "speaker_grpo", "evaluate")  # (the stage lines, not the estimate's rows)
    )
    import subprocess as sp

    has_gpu = sp.run("nvidia-smi", shell=True, capture_output=True).returncode == 0
    if not has_gpu:  # without a layout, the trainers' GPU needs are one warning (a layout's `machine:` is what a plan checks them on)
        assert r.returncode == 0 and out.rstrip().endswith("0 problem(s)"), out
        warned = next(l for l in out.splitlines() if l.startswith("warning: no GPU here"))
        assert "speaker_grpo, sft, director_grpo, director_dpo need a CUDA GPU with >= 24.0 GiB" in warned, warned
        assert "/models" not in out and "does not serve" not in out  # the endpoints answered and serve the named models


@pytest.mark.integration
def test_plan_names_a_dead_endpoint_and_missing_data(tmp_path):
    cfg = json.loads(json.dumps(TINY))
    cfg["data_path"] = str(tmp_path / "nowhere")
    cfg["endpoints"] = {"vllm_server_url": "http://u:pw@127.0.0.1:9/v1", "judge_provider": "embedded"}
    r = mascot(str(write_cfg(tmp_path, cfg)), "--plan", "--runs-dir", str(tmp_path / "runs"), timeout=120)
    assert r.returncode == 2 and not (tmp_path / "runs").exists()
    assert "facebook/empathetic_dialogues" in r.stdout and "shared/data/README.md" not in r.stdout + r.stderr
    assert "http://127.0.0.1:9/v1 does not answer /models" in r.stdout and "pw" not in r.stdout


def test_run_name_must_be_a_plain_name(tmp_path):
    r = mascot(str(write_cfg(tmp_path, TINY)), "--run-name", "../../x", "--runs-dir", str(tmp_path / "runs"))
    assert (
        r.returncode == 2
        and "run_name '../../x' must be a plain name" in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    )
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_secrets_stay_out_of_executed_notebooks_and_output_is_quiet(tmp_path):
    "A key in a server URL through ${MASCOT_API_KEY}: the stage runs, and no file of the run holds the key; no Tqdm or TCP-encryption notice."
    from fake_openai_server import FakeOpenAIServer

    key = "sk-plantedkey-0123456789"
    cfg = {
        "run_name": "sec",
        "dataset": "ED",
        "data_path": "demo:empathetic_dialogues",
        "endpoints": {"judge": "fake-model", "max_retries": 0},
        "stages": {"candidates": {**TINY["stages"]["candidates"], "num_samples": 1, "num_candidates": 2}},
    }
    with FakeOpenAIServer(model="fake-model") as srv:
        cfg["endpoints"]["vllm_server_url"] = srv.url.replace("http://", "http://user:${MASCOT_API_KEY}@")
        cfg["endpoints"]["judge_server_url"] = cfg["endpoints"]["vllm_server_url"]
        env = {**os.environ, "MASCOT_API_KEY": key, "PYTHONPATH": str(ROOT)}
        r = mascot(str(write_cfg(tmp_path, cfg)), "--runs-dir", str(tmp_path / "runs"), env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    leaked = [p for p in (tmp_path / "runs").rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not leaked, leaked
    executed = (tmp_path / "runs/sec/10_candidates/executed.ipynb").read_text()
    assert "${MASCOT_URL_USERINFO_0}@127.0.0.1" in executed  # the kernel read it from its environment
    for text in (r.stdout + r.stderr, executed):
        assert "TqdmWarning:" not in text and "IProgress not found" not in text and "without encryption" not in text


@pytest.mark.parametrize("paper", ["paper-ed", "paper-esconv", "paper-qmsum"])
@pytest.mark.parametrize("layout", ["1xh100", "2xh100", "1xh200"])
def test_gpu_layout_plans_the_paper_without_env_urls(tmp_path, layout, paper, monkeypatch):
    """`mascot run configs/paper-*.yaml --layout configs/gpu/<layout>.yaml --plan`: the managed server takes the place of the config's
    `${VLLM_SERVER_URL}` (not set here), every stage is valid with the layout's sizes, the plan names which GPU the server and each stage
    hold, and on a machine without a GPU it is checked against the layout's `machine:` with no problem; no folder is created."""
    from mascot.pipeline.run import load_pipeline_config
    from mascot.pipeline.plan import plan_report, gpus_here

    for var in ("VLLM_SERVER_URL", "JUDGE_SERVER_URL", "JUDGE_MODEL"):
        monkeypatch.delenv(var, raising=False)
    # where vLLM is installed is not what this checks (make test-fast runs without .venv-vllm)
    monkeypatch.setenv("MASCOT_VLLM_PYTHON", sys.executable)
    lay = yaml.safe_load((ROOT / f"configs/gpu/{layout}.yaml").read_text())
    cfg = load_pipeline_config(
        ROOT / f"configs/{paper}.yaml", ROOT / f"configs/gpu/{layout}.yaml", runs_dir=str(tmp_path / "runs")
    )
    cfg.data_path = str(tmp_path)  # local files (their layout is not what this checks)
    assert cfg.endpoints["judge"] == "Qwen/Qwen3-8B" and cfg.endpoints["vllm_server_url"] == "http://127.0.0.1:8000/v1"
    assert set(cfg.stages) == set(read_yaml(ROOT / f"configs/{paper}.yaml")["stages"])
    lines, problems = plan_report(cfg, f"{paper}.yaml")
    assert not (tmp_path / "runs").exists()
    share = lay["serve"]["gpu_memory_utilization"]
    assert lines[0].startswith(f"serve: vLLM Qwen/Qwen3-8B on GPU 0 at {share:g} of memory"), lines[0]
    assert not any("not valid" in line for line in lines), lines
    stage_gpu = lay["gpus"]["stages"]
    for line in lines[1:]:  # the stage lines (the estimate's rows are indented)
        if line.split(" ")[0] in ("speaker_grpo", "director_grpo", "candidates"):
            assert f"CUDA_VISIBLE_DEVICES={stage_gpu}" in line and "Qwen/Qwen3-8B" in line, line
    if not gpus_here():
        assert problems == [], problems
        assert any(l.startswith(f"machine: the layout's, 1 node(s) of {lay['machine']['gpus']} x ") for l in lines), (
            lines
        )
    assert not any("/models" in p or "does not serve" in p or "unknown key" in p for p in problems), problems


def test_plan_checks_the_layout_against_the_gpus(tmp_path, monkeypatch):
    "With GPUs (stubbed: one 80 GiB card), a server share that leaves a training stage too little, and a stage on a GPU that is not there."
    import mascot.pipeline.plan as pl
    from mascot.pipeline.run import load_pipeline_config

    monkeypatch.setattr(pl, "gpus_here", lambda: [("NVIDIA H100 80GB HBM3", 79.6)])
    cfg = load_pipeline_config(ROOT / "configs/paper-ed.yaml", ROOT / "configs/gpu/1xh100.yaml", runs_dir=str(tmp_path))
    cfg.data_path = str(tmp_path)
    cfg.serve.gpu_memory_utilization = 0.8
    cfg.gpus = {"stages": "0", "sft": "1"}
    _, problems = pl.plan_report(cfg, "paper-ed.yaml")
    assert any(
        p.startswith(
            "stage speaker_grpo trains Qwen/Qwen3-8B: needs >= 24.0 GiB (estimated), GPU 0 has 16 GiB beside the server"
        )
        for p in problems
    ), problems
    assert "stage sft: gpus: GPU 1 is not on this machine (it has 1)" in problems
    cfg.serve.gpu_memory_utilization = 0.15
    _, problems = pl.plan_report(cfg, "paper-ed.yaml")
    assert any(p.startswith("serve: Qwen/Qwen3-8B needs about 18.0 GiB of GPU 0") for p in problems), problems


@pytest.mark.integration
def test_gpu_check_runs_on_cpu(tmp_path):
    "scripts/gpu_check.py --device cpu: the tiny Qwen3 built here and one step of each trainer, every check passing (about a minute)."
    r = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--output", str(tmp_path / "gc.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "gc.json").read_text())
    for k in (
        "tiny_qwen3_on_device",
        "placement_and_dtype",
        "reward_model_step",
        "speaker_grpo_step",
        "sft_step",
        "director_dpo_step",
    ):
        assert res[k]["ok"], (k, res[k])
    assert res["tiny_qwen3_on_device"]["architecture"] == "Qwen3ForCausalLM"


@pytest.mark.served
@pytest.mark.integration
def test_sigterm_stops_the_managed_server(tmp_path):
    """`serve:` with the fake OpenAI server standing in for vLLM (MASCOT_VLLM_PYTHON runs it on the port vLLM would take, every reply
    slow): SIGTERM during the first stage ends `mascot run` with 130, the stage marked interrupted, and the server's process group
    gone."""
    wrapper = tmp_path / "vllm-python"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "a = sys.argv[1:]\n"
        "name = a[a.index('--served-model-name') + 1] if '--served-model-name' in a else a[a.index('--model') + 1]\n"
        f"os.execv(sys.executable, [sys.executable, {str(ROOT / 'tests/fake_openai_server.py')!r}, '--port', a[a.index('--port') + 1],\n"
        "          '--model', name, '--fault', 'slow=1.0'])\n"
    )
    wrapper.chmod(0o755)
    cfg = {
        "run_name": "term",
        "dataset": "ED",
        "data_path": "demo:empathetic_dialogues",
        "model_name": "fake-model",
        "serve": {"judge": True, "port": 0, "device": "cpu", "stop_grace": 5},
        "endpoints": {"max_retries": 0},
        "stages": {"candidates": {**TINY["stages"]["candidates"], "num_samples": 2}},
    }
    env = {**os.environ, "MASCOT_VLLM_PYTHON": str(wrapper), "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mascot.pipeline.run",
            str(write_cfg(tmp_path, cfg)),
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = tmp_path / "runs" / "term"
    summary, deadline = run / "10_candidates" / "run_summary.json", time.time() + 300
    while time.time() < deadline and p.poll() is None and not (run / "10_candidates" / "executed.ipynb").exists():
        time.sleep(1)
    time.sleep(3)  # the stage's kernel is starting or already waiting on the (slow) server
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 130, out[-3000:]
    served = json.loads((run / "serve.json").read_text())
    assert served["stopped"] and "[serve] stopped pid" in out, out[-3000:]
    for pid in served["pids"]:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert json.loads(summary.read_text())["status"] == "interrupted"
