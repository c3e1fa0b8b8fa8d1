"`mascot run`: config errors before any work, kill + --resume without redoing completed stages, and the results site in headless Chromium."

import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def mascot(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "mascot.apps.pipeline", *args],
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


def test_missing_input_path_stops_before_any_work(tmp_path):
    cfg = {**TINY, "stages": {"reward_model": {"data_path": str(tmp_path / "no-such-pairs")}}}
    r = mascot(str(write_cfg(tmp_path, cfg)), "--runs-dir", str(tmp_path / "runs"))
    assert r.returncode != 0 and "no-such-pairs does not exist" in r.stderr and not (tmp_path / "runs").exists()


def test_interrupt_then_resume_skips_completed_stages(tmp_path):
    cfg = write_cfg(tmp_path, TINY)
    runs = (
        tmp_path / "runs"
    )  # given as the relative "runs", as `make demo` does: every stage must still write inside it
    p = subprocess.Popen(
        [sys.executable, "-m", "mascot.apps.pipeline", str(cfg), "--runs-dir", "runs"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
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
    r = mascot(str(cfg), "--runs-dir", "runs", "--resume", timeout=900, cwd=tmp_path)
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
    r = mascot(str(cfg), "--runs-dir", str(runs))
    assert r.returncode != 0 and "--resume" in r.stderr


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
