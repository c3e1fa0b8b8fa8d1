"""Experiment tracking and keys as the authors' code does them: W&B only when WANDB_PROJECT is set (here offline, into a temporary WANDB_DIR),
keys read from a `.env` file (python-dotenv) into the environment, and no key ever written to a run file."""

import os, subprocess, sys
from pathlib import Path
import pytest

pytestmark = pytest.mark.integration  # each test trains a reward model

ROOT = Path(__file__).resolve().parents[1]
SECRET = "dotenv-secret-0123456789abcdef"


def test_dotenv_key_reaches_the_environment_and_no_run_file(tmp_path, monkeypatch):
    from mascot.core.runtime import RunDir
    from mascot.core.config import load_env_file

    monkeypatch.delenv("MASCOT_NO_DOTENV", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    (tmp_path / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    assert load_env_file(tmp_path / ".env") == tmp_path / ".env" and os.environ["ANTHROPIC_API_KEY"] == SECRET
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)  # undone after the test (load_dotenv wrote os.environ directly)
    run = RunDir(tmp_path / "run", {"judge_server_url": f"http://h/v1?key={SECRET}", "note": f"key {SECRET}"})
    run.extra["echo"] = SECRET
    run.finish()
    for f in ("run_config.json", "run_summary.json"):
        assert SECRET not in (tmp_path / "run" / f).read_text(), f


def test_reward_model_logs_to_wandb_offline_without_the_key(data_dir, tmp_path):
    pytest.importorskip("wandb")
    from mascot.domain.dataset_loading import load_contexts
    from mascot.stage1.candidates import save_pairs
    from mascot.testing import known_label_pairs

    rows = known_label_pairs(load_contexts("ESConv", split="train", data_path=str(data_dir / "esconv"))[:6])
    (tmp_path / "pairs").mkdir()
    save_pairs(rows, tmp_path / "pairs")
    (tmp_path / ".env").write_text(
        f"WANDB_API_KEY={SECRET}\n"
    )  # the key comes from .env, as the authors' code keeps it
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "MASCOT_NO_DOTENV"}
    env.update(
        WANDB_MODE="offline",
        WANDB_PROJECT="mascot-offline-test",
        WANDB_DIR=str(tmp_path / "wb"),
        WANDB_SILENT="true",
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        MASCOT_TINY_MODEL="1",  # what is asserted is where the logs and the key go, not what the model learns
    )
    (tmp_path / "wb").mkdir()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mascot.cli",
            "train-reward-model",
            "--dataset",
            "ESConv",
            "--data-path",
            str(tmp_path / "pairs"),
            "--output-dir",
            str(tmp_path / "rm"),
            "--num-train-epochs",
            "1",
            "--max-length",
            "256",
            "--lora-r",
            "4",
            "--per-device-train-batch-size",
            "2",
            "--holdout-fraction",
            "0.34",
            "--trl",
            '{"max_steps": 2}',
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((tmp_path / "wb").rglob("*"))[:20]
    log = next(runs[0].glob("run-*.wandb")).read_bytes()  # the offline run's records (what `wandb sync` would upload)
    assert all(k in log for k in (b"train/loss", b"train/accuracy", b"train/global_step", b"mascot-offline-test")), log[
        :300
    ]
    files = [p for p in [*tmp_path.joinpath("wb").rglob("*"), *tmp_path.joinpath("rm").rglob("*")] if p.is_file()]
    leaked = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked  # neither W&B's files nor run_config/run_summary/metadata hold the key
