"""GPU layouts beyond one card: a stage's trainer under `accelerate launch` through `mascot run` (two processes on gloo here, the GPUs' code
path), the plan of an 8-GPU node, every shipped layout's plan with the GPU-hours it estimates, and the sbatch script of a two-node
layout."""

import json, os, subprocess, sys
from pathlib import Path
import pytest
import yaml
from mascot.core.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration  # two trainer processes and a papermill kernel: about two minutes on 2 loaded cores
def test_trainer_stage_runs_under_accelerate_launch_on_two_processes(tmp_path):
    """`mascot run configs/smoke.yaml --layout configs/gpu/cpu-2proc.yaml --only reward_model`: the stage's notebook runs its trainer under
    `accelerate launch` with world size 2 (DDP over gloo), rank 0 alone writes the adapter and its provenance, and the effective batch
    (per device x accumulation x processes) is the smoke config's."""
    from mascot.domain.dataset_loading import load_contexts
    from mascot.training.pairs import save_pairs
    from mascot.testing import known_label_pairs, stage

    # the candidates stage's output, made here: pairs with known labels from the package's demo contexts
    rows = known_label_pairs(load_contexts("ED", split="train", data_path="demo:empathetic_dialogues")[:6])
    (tmp_path / "pairs").mkdir()
    save_pairs(rows, tmp_path / "pairs")
    stage(tmp_path / "runs/smoke", "10_candidates", {"data_path": str(tmp_path / "pairs")})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASCOT_TINY_MODEL": "1", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mascot.pipeline.run", "configs/smoke.yaml", "--layout", "configs/gpu/cpu-2proc.yaml"]
        + ["--only", "reward_model", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sdir = tmp_path / "runs/smoke/11_reward_model"
    launch = json.loads((sdir / "meta.json").read_text())["launch"]
    assert (launch["launcher"], launch["world_size"], launch["device"]) == ("accelerate", 2, "cpu"), launch
    assert launch["accelerate_config"].endswith("configs/accelerate/cpu_gloo.yaml") and launch["returncode"] == 0
    assert launch["command"][1:3] == ["-m", "accelerate.commands.launch"]
    assert json.loads((sdir / "run_summary.json").read_text())["launch"]["world_size"] == 2
    # the stage's notebook, run by papermill, shows what ran: the launcher, the world size and the accelerate config
    assert (
        "accelerate launch: 2 processes (cpu_gloo.yaml): mascot.training.reward_trainer:train_reward_model"
        in (sdir / "executed.ipynb").read_text()
    )
    out = Path(json.loads((sdir / "outputs.json").read_text())["path"])
    assert launch["rank0"] == {"path": str(out), "world_size": 2}
    meta = json.loads((out / "mascot_metadata.json").read_text())
    # the Trainer's own world size: 2 only when the two processes trained as one DDP group
    smoke = yaml.safe_load((ROOT / "configs/smoke.yaml").read_text())["stages"]["reward_model"]
    assert meta["effective_batch"] == {"per_device": 2, "accumulation": 1, "world_size": 2, "total": 4}, meta
    assert (
        meta["effective_batch"]["total"] == smoke["per_device_train_batch_size"]
    )  # the smoke config's (accumulation 1)
    assert meta["world_size"] == 2 and meta["steps"] >= 1
    for rank, folder in ((0, "run"), (1, "run-rank1")):  # both ranks trained
        s = json.loads((out / folder / "run_summary.json").read_text())
        assert (s["status"], s["rank"], s["world_size"]) == ("completed", rank, 2), s
    # rank 1 wrote its run record and nothing else: one adapter, one metadata file, one log in the whole run
    files = [p.relative_to(tmp_path) for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    for name in ("adapter_model.safetensors", "mascot_metadata.json", "log_history.json", "training_args.bin"):
        assert [f for f in files if f.name == name] == [(out / name).relative_to(tmp_path)], (name, files)
    assert sorted(p.name for p in (out / "run-rank1").iterdir()) == ["run_config.json", "run_summary.json"]


def test_plan_of_the_8_gpu_layout(tmp_path, monkeypatch, capsys):
    """`mascot run configs/paper-ed.yaml --layout configs/gpu/8xh100.yaml --plan`: checked against the layout's eight H100s where nvidia-smi
    does not answer, no problem, a process/GPU table (four vLLM replicas on GPUs 0-3, each trainer as 4 processes on GPUs 4-7) and every
    trainer's effective batch equal to the paper config's."""
    from mascot.pipeline.run import main, trainer_batch
    from mascot.pipeline.plan import is_trainer
    from mascot.pipeline.plan import gpus_here
    from mascot.stages import STAGE_BY_KEY

    for var in ("VLLM_SERVER_URL", "JUDGE_SERVER_URL", "JUDGE_MODEL"):
        monkeypatch.delenv(var, raising=False)  # the layout's managed server takes their place
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "configs/paper-ed.yaml",
                "--layout",
                "configs/gpu/8xh100.yaml",
                "--plan",
                "--runs-dir",
                str(tmp_path / "runs"),
            ]
        )
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.rstrip().endswith("0 problem(s)"), out[-3000:]
    assert not (tmp_path / "runs").exists()
    lines = out.splitlines()
    if not gpus_here():
        assert any(l.startswith("machine: the layout's, 1 node(s) of 8 x NVIDIA H100 80GB HBM3") for l in lines)
    table = lines[lines.index("processes and GPUs (GiB per GPU, estimated from the models' sizes):") + 2 :]
    servers = [l.split() for l in table if l.strip().startswith("vLLM server")]
    assert [(s[2], s[4]) for s in servers] == [(f":{8000 + i}", str(i)) for i in range(4)], servers
    paper = read_yaml(ROOT / "configs/paper-ed.yaml")["stages"]
    trainers = [k for k in paper if is_trainer(STAGE_BY_KEY[k])]
    for k in trainers:
        row = next(l for l in table if l.strip().startswith(f"{k}:"))
        assert "accelerate launch x4 (multi_gpu_ddp.yaml)" in row and " 4,5,6,7 " in row, row
    batches = lines[
        lines.index("effective batches (per device x accumulation x processes = examples per optimiser step):") + 1 :
    ]
    for k in (
        trainers
    ):  # per device x accumulation x 4 processes = the paper config's total, computed here from the config alone
        want = trainer_batch(STAGE_BY_KEY[k], {f: v for f, v in paper[k].items() if f != "rollout_server_url"})["total"]
        got = next(l for l in batches if l.split()[0] == f"{k}:").split()
        assert got[4:7] == ["x", "4", "="] and int(got[7]) == want, (k, got, want)


PAPER = sorted(ROOT.glob("configs/paper-*.yaml"))
PAPER = [p for p in PAPER if p.name != "paper-base.yaml"]  # the shared base the paper configs extend, not a run
LAYOUTS = sorted(ROOT.glob("configs/gpu/*.yaml"))
UNSET = ("VLLM_SERVER_URL", "JUDGE_SERVER_URL", "JUDGE_MODEL")


def test_every_layout_plans_clean_with_gpu_hours(tmp_path, monkeypatch):
    """Every layout of configs/gpu/ over a paper config (the CPU layout over the smoke config it is written for) plans with no problem
    on this machine, checked against its `machine:` where nvidia-smi does not answer, and ends with the GPU-hours it estimates: a row
    per stage, then the total."""
    from mascot.pipeline.run import load_pipeline_config
    from mascot.pipeline.plan import plan_report

    for var in UNSET:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(ROOT)
    assert PAPER and len(LAYOUTS) >= 7, (PAPER, LAYOUTS)
    for layout in LAYOUTS:
        gpu = "machine:" in layout.read_text()
        assert gpu or layout.name.startswith("cpu-"), f"{layout.name}: a GPU layout has a machine: entry"
        # each layout over the ED config, the one-H200 layout over every paper config (they differ in dataset and run name only)
        configs = (
            ([ROOT / "configs/paper-ed.yaml"] + (PAPER if layout.name == "1xh200.yaml" else []))
            if gpu
            else [ROOT / "configs/smoke.yaml"]
        )
        for config in dict.fromkeys(configs):
            cfg = load_pipeline_config(config, layout, allow_unset=True, runs_dir=str(tmp_path / "runs"))
            lines, problems = plan_report(cfg, config.name)
            assert problems == [], (config.name, layout.name, problems)
            trainers = [
                l for l in lines if l.startswith("  ") and (": trainer in its" in l or ": accelerate launch" in l)
            ]
            if gpu:  # each trainer on a GPU of the layout's machine, with the memory it needs of it
                assert trainers and all(l.rstrip().endswith(("each", "below 1B)")) for l in trainers), trainers
            head = next(i for i, l in enumerate(lines) if l.startswith("GPU-hours, estimated for "))
            rows = [l.split()[0] for l in lines[head + 2 : -1]]
            assert rows == list(cfg.stages), (layout.name, rows)
            assert lines[-1].startswith("GPU-hours in total (estimate): "), (layout.name, lines[-1])
            assert float(lines[-1].split(": ")[1].split()[0]) > 0, lines[-1]
    assert not (tmp_path / "runs").exists()


def test_plan_without_a_layout_lists_the_stages_then_one_problem(monkeypatch, tmp_path, capsys):
    """`mascot run configs/paper-ed.yaml --plan` without a layout or the server's URL in the environment: every stage with what it needs,
    the GPU-hours for a reference GPU, and exactly one problem, naming VLLM_SERVER_URL."""
    from mascot.pipeline.run import main
    from mascot.pipeline.managed_vllm import gpus_here

    for var in UNSET:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exit_:
        main(["configs/paper-ed.yaml", "--plan", "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert exit_.value.code == 2, out[-2000:]
    lines = out.splitlines()
    stages = list(read_yaml(ROOT / "configs/paper-ed.yaml")["stages"])
    assert [l.split()[0] for l in lines[1 : 1 + len(stages)]] == stages, lines[: 1 + len(stages)]
    assert "GPU >= 24.0 GiB estimated (LoRA)" in next(l for l in lines if l.startswith("sft "))
    assert any(l.startswith("GPU-hours in total (estimate): ") for l in lines)
    tail = lines[lines.index("1 problem(s)") :]
    assert len(tail) == 2 and "VLLM_SERVER_URL" in tail[1], tail
    assert gpus_here() or any(l.startswith("warning: no GPU here") for l in lines)


def test_emit_slurm_writes_a_two_node_script_bash_accepts(tmp_path, monkeypatch, capsys):
    """`mascot run configs/paper-ed.yaml --layout configs/gpu/2x8xh100.yaml --emit-slurm FILE`: an sbatch script for two nodes, vLLM on
    the last (eight replicas, bound to its address), `mascot run` on the first with the server's URLs, that `bash -n` accepts; with a third
    node a trainer spans two machines. A one-node layout has no script."""
    from mascot.pipeline.run import main

    for var in ("VLLM_SERVER_URL", "JUDGE_SERVER_URL", "JUDGE_MODEL", "MASCOT_SERVE_URLS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(ROOT)

    def emit(layout, name):
        with pytest.raises(SystemExit) as exit_:
            main(
                ["configs/paper-ed.yaml", "--layout", str(layout), "--emit-slurm", str(tmp_path / name)]
                + ["--runs-dir", str(tmp_path / "runs")]
            )
        return exit_.value.code, capsys.readouterr()

    code, out = emit("configs/gpu/2x8xh100.yaml", "two.sbatch")
    assert code == 0 and out.out.startswith(f"wrote {tmp_path / 'two.sbatch'}"), out
    script = (tmp_path / "two.sbatch").read_text()
    r = subprocess.run(["bash", "-n", str(tmp_path / "two.sbatch")], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = script.splitlines()
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --gpus-per-node=8" in lines
    assert (
        'SERVER_NODE="${NODES[1]}"' in lines
        and 'export MASCOT_TRAINER_NODES="$(IFS=,; echo "${NODES[*]:0:1}")"' in lines
    )
    serve = next(l for l in lines if "-m mascot.pipeline.serve " in l)
    assert (
        "--gpus 0,1,2,3,4,5,6,7" in serve
        and "--replicas 8" in serve
        and "--host 0.0.0.0" in serve
        and "--runtime-lora" in serve
    )
    assert 'export MASCOT_SERVE_URLS="$URLS"' in lines and any("http://$SERVER_NODE:$port/v1" in l for l in lines)
    run = lines[-1].split()
    assert run[1:3] == ["-m", "mascot.pipeline.run"] and run[run.index("--layout") + 1] == str(
        ROOT / "configs/gpu/2x8xh100.yaml"
    )
    assert run[run.index("--runs-dir") + 1] == str(tmp_path / "runs") and run[-1] == '"$@"'
    assert not (tmp_path / "runs").exists()  # written, nothing run
    # a third node: the reward model's trainer across the first two (launch.machines 2, world size 16)
    lay = yaml.safe_load((ROOT / "configs/gpu/2x8xh100.yaml").read_text())
    lay["machine"]["nodes"] = 3
    lay["launch"]["reward_model"] = {"machines": 2}
    lay["stages"]["reward_model"]["per_device_train_batch_size"] = 1
    (tmp_path / "3x8.yaml").write_text(yaml.safe_dump(lay))
    code, out = emit(tmp_path / "3x8.yaml", "three.sbatch")
    assert code == 0, out
    three = (tmp_path / "three.sbatch").read_text()
    assert "#SBATCH --nodes=3" in three and 'SERVER_NODE="${NODES[2]}"' in three and '"${NODES[*]:0:2}"' in three
    assert subprocess.run(["bash", "-n", str(tmp_path / "three.sbatch")]).returncode == 0
    code, out = emit("configs/gpu/8xh100.yaml", "one.sbatch")
    assert (
        code == 2 and "gives the vLLM server no node of its own" in out.err and not (tmp_path / "one.sbatch").exists()
    )
