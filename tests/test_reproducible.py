"Same config, same seed, same run: a trimmed stage-2 pipeline (branching, director GRPO and DPO) run twice at once, and `mascot diff-runs` finds no difference."

import json, os, subprocess, sys
from pathlib import Path
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# the tiny random model; every stage-2 stage at its smallest: 2 contexts (one held out), 1 turn, 3 candidate directives per state
# both episode stages: two training contexts, one turn, short replies
EPISODES = {
    "split": "train",
    "num_samples": 2,
    "score_margin": 0.0,
    "judge_examples": 1,
    "judge_max_tokens": 100,
    "num_turns": 1,
    "director_max_tokens": 40,
    "speaker_max_tokens": 12,
    "user_max_tokens": 8,
}
TRIMMED = {
    "run_name": "same",
    "dataset": "ED",
    "data_path": "demo:empathetic_dialogues",
    "seed": 0,
    "endpoints": {"judge_provider": "embedded", "max_concurrency": 48},
    "stages": {
        "group_data": {**EPISODES, "num_episodes": 2},
        "branching": {**EPISODES, "num_candidates": 3},
        "group_reward_model": {"num_train_epochs": 1, "lora_r": 4, "holdout_fraction": 0.34},
        "director_grpo": {
            "max_steps": 1,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "beta": 0.0,
            "mask_truncated_completions": False,
            "unparsed_directive_reward": None,
            "max_completion_length": 40,
            "speaker_max_tokens": 12,
            "user_max_tokens": 8,
            "num_turns": 1,
            "lora_r": 4,
            "holdout_fraction": 0.34,
            "eval_samples_per_state": 1,
        },
        "director_dpo": {"max_steps": 1, "lora_r": 4, "per_device_train_batch_size": 2, "format_pairs": True},
    },
}


@pytest.mark.integration
def test_two_runs_of_one_config_are_identical(tmp_path):
    cfg = tmp_path / "trimmed.yaml"
    cfg.write_text(yaml.safe_dump(TRIMMED))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MASCOT_TINY_MODEL": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    # both at once: neither the other run's load nor the order in which its requests finish may change a byte
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mascot.pipeline.run", str(cfg), "--runs-dir", str(tmp_path / name)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("a", "b")
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
    a, b = tmp_path / "a" / "same", tmp_path / "b" / "same"
    # the runs made what stage 2 rests on: rolled-out states, and the two directors' weights
    states = [json.loads(l) for l in next(a.glob("20_branching/out/*/states.jsonl")).read_text().splitlines()]
    assert len(states) == 2 and all(len(s["candidates"]) == 3 for s in states), states
    for stage in ("22_director_grpo", "23_director_dpo"):
        assert list(a.glob(f"{stage}/out/*/adapter_model.safetensors")), stage
    r = subprocess.run(
        [sys.executable, "-m", "mascot.cli", "diff-runs", str(a), str(b)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    from mascot.pipeline.diff_runs import diff_runs

    compared = {e["stage"]: e["identical"] for e in diff_runs(a, b)}
    assert "out/branching_ED_smollm2-135m-instruct/states.jsonl" in compared["20_branching"], compared
    for stage in ("22_director_grpo", "23_director_dpo"):
        assert any(f.endswith("adapter_model.safetensors") for f in compared[stage]), compared[stage]
