"""Scale-out on an existing engine: a trainer launched as two processes (`torchrun`, DDP over gloo on these CPU cores) trains on both ranks and
saves one adapter. The same code runs under `accelerate launch --config_file configs/accelerate/*.yaml` on GPUs (DDP, DeepSpeed ZeRO-2/3)."""

import json, os, shutil, subprocess, sys
from pathlib import Path
from browser import free_port
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # two trainer processes under torchrun

ROOT = Path(__file__).resolve().parents[1]


def test_reward_model_trains_on_two_ranks_and_saves_one_adapter(data_dir, tmp_path):
    from mascot.domain.dataset_loading import load_contexts
    from mascot.training.pairs import save_pairs
    from mascot.testing import known_label_pairs

    rows = known_label_pairs(load_contexts("ESConv", split="train", data_path=str(data_dir / "esconv"))[:8])
    (tmp_path / "pairs").mkdir()
    save_pairs(rows, tmp_path / "pairs")
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(free_port()),
            "-m",
            "mascot.stage1.speaker_reward_model",
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
            "0.3",
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
    out = tmp_path / "rm" / "Individual_ESConv_smollm2-135m-instruct"
    for rank, folder in ((0, "run"), (1, "run-rank1")):  # every rank trained, in one world of two
        s = json.loads((out / folder / "run_summary.json").read_text())
        assert s["status"] == "completed" and s["rank"] == rank and s["world_size"] == 2, s
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("adapter_model.safetensors")] == [
        out.relative_to(tmp_path) / "adapter_model.safetensors"
    ]
    meta = json.loads((out / "mascot_metadata.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 2
    history = json.loads((out / "log_history.json").read_text())
    assert sum("loss" in h for h in history) == 2
