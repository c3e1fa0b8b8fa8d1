"""Stage 1 learning signal on the embedded model (not part of the default tests).

Candidates judged by the embedded judge on real ESConv contexts -> preference pairs -> persona reward model (held-out pairwise accuracy before
and after, on contexts never trained on) -> speaker GRPO (held-out mean reward-model score of the base vs the trained policy).
Writes bench/results/stage1_learning.json.

    python bench/stage1_learning.py [--num-samples 20] [--num-candidates 4] [--grpo-steps 30] [--grpo-lr 2e-4] [--score-margin 0.2] [--work-dir DIR]
"""

import argparse, asyncio, json, os, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.core.store import read_jsonl
from mascot.domain.datasets import shared_data_dir
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.stage1.candidates import CandidatesConfig, generate_individual_async
from mascot.training.reward_trainer import RewardModelConfig, train_reward_model
from mascot.stage1.speaker_grpo import SpeakerGRPOConfig, train_speaker


def data_summary(folder: Path) -> dict:
    "Counted from the store itself, so a resumed run reports the whole dataset (run summaries count only their own run)."
    recs = list(read_jsonl(folder / "candidates.jsonl"))
    cands = [c for r in recs for c in r["candidates"]]
    summ = json.loads(sorted((folder / "runs").glob("*/run_summary.json"))[-1].read_text())
    return {
        "num_queries": len(recs),
        "num_contexts": len({r["context_id"] for r in recs}),
        "num_candidates": len(cands),
        "num_unscored_candidates": sum(c.get("overall") is None for c in cands),
        "num_pairs": summ["num_pairs"],
        "max_pairs": summ["max_pairs"],
        "generation_runs": len(list((folder / "runs").glob("*/run_summary.json"))),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-samples", type=int, default=20)
    ap.add_argument("--num-candidates", type=int, default=4)
    ap.add_argument("--score-margin", type=float, default=0.2)
    ap.add_argument("--grpo-steps", type=int, default=30)
    ap.add_argument("--rm-epochs", type=float, default=3)
    ap.add_argument("--grpo-lr", type=float, default=2e-4)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--reuse-rm", action="store_true", help="keep the reward model already trained in --work-dir")
    ap.add_argument("--out", default="bench/results/stage1_learning.json")
    a = ap.parse_args()
    work = Path(a.work_dir or tempfile.mkdtemp(prefix="stage1_"))
    res, t = {"settings": vars(a), "work_dir": str(work)}, time.time()
    folder = asyncio.run(
        generate_individual_async(
            CandidatesConfig(
                dataset="ESConv",
                data_path=str(shared_data_dir() / "esconv"),
                split="train",
                num_samples=a.num_samples,
                num_candidates=a.num_candidates,
                score_margin=a.score_margin,
                max_tokens=48,
                output_dir=str(work / "rl"),
                resume=(work / "rl").exists(),
                judge_provider="embedded",
            ),
            embedded=EmbeddedBackend(),
        )
    )
    res["data"] = data_summary(folder)
    res["data"]["seconds_this_run"] = round(time.time() - t, 1)
    print(res["data"], flush=True)
    t = time.time()
    rm, reused = work / "rm" / "Individual_ESConv_smollm2-135m-instruct", a.reuse_rm
    if not (
        reused and (rm / "mascot_metadata.json").exists()
    ):  # --reuse-rm: train the speaker again against the reward model already there
        reused = False
        rm = train_reward_model(
            RewardModelConfig(
                dataset="ESConv",
                data_path=str(folder),
                output_dir=str(work / "rm"),
                num_train_epochs=a.rm_epochs,
                lora_r=16,
                max_length=512,
                holdout_fraction=0.25,
            )
        )
    m = json.loads((rm / "mascot_metadata.json").read_text())
    res["reward_model"] = {
        k: m[k]
        for k in (
            "heldout_accuracy_before",
            "heldout_accuracy_after",
            "num_train_pairs",
            "num_heldout_pairs",
            "steps",
            "train_loss",
        )
    }
    res["reward_model"].update(
        heldout_contexts=len(m["heldout_contexts"]),
        reused=reused,
        seconds=None if reused else round(time.time() - t, 1),
    )
    print(res["reward_model"], flush=True)
    t = time.time()
    sp = train_speaker(
        SpeakerGRPOConfig(
            dataset="ESConv",
            data_path=str(folder),
            reward_model_path=str(rm),
            output_dir=str(work / "llm"),
            max_steps=a.grpo_steps,
            num_generations=4,
            per_device_train_batch_size=4,
            max_completion_length=40,
            eval_max_tokens=40,
            learning_rate=a.grpo_lr,
            holdout_fraction=0.25,
        )
    )
    m = json.loads((sp / "mascot_metadata.json").read_text())
    res["speaker_grpo"] = {
        k: m[k] for k in ("base_mean_rm", "trained_mean_rm", "steps", "max_weight_change", "num_heldout_prompts")
    }
    res["speaker_grpo"]["seconds"] = round(time.time() - t, 1)
    log = json.loads((sp / "log_history.json").read_text())  # TRL's whole log, saved beside the adapter
    res["speaker_grpo"]["reward_log_first_last"] = [log[0], log[-2] if len(log) > 1 else None]
    print(res["speaker_grpo"], flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
