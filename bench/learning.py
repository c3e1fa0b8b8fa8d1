"""Learning checks on signals the model can learn (issue #14, item 4), at CPU sizes; resumable section by section.

reward_model: a persona reward model on known-label pairs (each ESConv context's real reply vs its degraded copies: the context parroted, the
    persona's name alone, the reply cut off, another conversation's reply), held-out accuracy on unseen contexts with its binomial 95% CI.
speaker: speaker GRPO (the package's train_speaker, gated reward) against that reward model on the same contexts' persona prompts; held-out
    prompts sampled at the training temperature, several samples each, the same seeds for base and trained: paired difference +- s.e. and the
    degenerate-reply rate of each.
Not yet here: the group reward model, the GRPO director and the DPO director on programmatic group rewards.

Every section writes its figures into --out as soon as it finishes; a rerun skips the sections already there (--force reruns them).

    python bench/learning.py [--rm-epochs 2] [--grpo-steps 20] [--eval-samples 4] [--work-dir DIR] [--out bench/results/learning.json]
"""
import argparse, json, os, tempfile, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.data import load_contexts, shared_data_dir
from mascot.pairs import save_pairs
from mascot.reward_model import RewardModelConfig, known_label_pairs, train_reward_model
from mascot.speaker_grpo import SpeakerGRPOConfig, train_speaker

def contexts():
    d = str(shared_data_dir() / "esconv")
    return [c for s in ("train", "valid", "test") for c in load_contexts("ESConv", split=s, data_path=d)]

def section_reward_model(a, work: Path) -> dict:
    rows = known_label_pairs(contexts())
    (work / "pairs").mkdir(parents=True, exist_ok=True); save_pairs(rows, work / "pairs")
    t = time.time()
    out = train_reward_model(RewardModelConfig(dataset="ESConv", data_path=str(work / "pairs"), output_dir=str(work / "rm"), num_train_epochs=a.rm_epochs,
                                               max_length=256, lora_r=8, learning_rate=1e-3, per_device_train_batch_size=8, holdout_fraction=0.3))
    m = json.loads((out / "mascot_metadata.json").read_text())
    return {"heldout_accuracy": m["heldout_accuracy_after"], "ci95": m["heldout_accuracy_after_ci95"], "heldout_accuracy_before": m["heldout_accuracy_before"],
            "n_pairs": m["num_heldout_pairs"], "n_train_pairs": m["num_train_pairs"], "heldout_contexts": len(m["heldout_contexts"]),
            "steps": m["steps"], "seconds": round(time.time() - t, 1), "path": str(out)}

def section_speaker(a, work: Path, rm_path: str) -> dict:
    folder = work / "speaker_prompts"; folder.mkdir(parents=True, exist_ok=True)
    rows = known_label_pairs(contexts(), kinds=("name_only",))  # one persona prompt per context
    (folder / "candidates.jsonl").write_text("".join(json.dumps({"prompt": r["prompt"], "persona": r["persona"], "context_id": r["context_id"]}) + "\n"
                                                     for r in rows))
    t = time.time()
    out = train_speaker(SpeakerGRPOConfig(dataset="ESConv", data_path=str(folder), reward_model_path=rm_path, output_dir=str(work / "llm"),
                                          max_steps=a.grpo_steps, learning_rate=a.grpo_lr, max_completion_length=48, eval_max_tokens=48,
                                          eval_samples_per_prompt=a.eval_samples, holdout_fraction=0.3, lora_r=8))
    m = json.loads((out / "mascot_metadata.json").read_text())
    return {k: m[k] for k in ("paired_diff", "se", "n_prompts", "samples_per_prompt", "degenerate_rate_base", "degenerate_rate_trained",
                              "base_mean_rm", "trained_mean_rm", "steps", "prompts_per_step")} | {"seconds": round(time.time() - t, 1), "path": str(out)}

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rm-epochs", type=float, default=2); ap.add_argument("--grpo-steps", type=int, default=20)
    ap.add_argument("--grpo-lr", type=float, default=5e-4); ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--work-dir", default=None); ap.add_argument("--out", default="bench/results/learning.json")
    ap.add_argument("--force", action="store_true", help="rerun the sections already in --out")
    a = ap.parse_args()
    out = Path(a.out)
    res = json.loads(out.read_text()) if out.exists() and not a.force else {}
    work = Path(a.work_dir or res.get("work_dir") or tempfile.mkdtemp(prefix="learning_"))
    res.update(work_dir=str(work), settings=vars(a))
    def save():
        out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(res, indent=2))
    if "reward_model" not in res:
        res["reward_model"] = section_reward_model(a, work); save(); print("reward_model", res["reward_model"], flush=True)
    if "speaker" not in res:
        res["speaker"] = section_speaker(a, work, res["reward_model"]["path"]); save(); print("speaker", res["speaker"], flush=True)
    save(); print(f"wrote {out}")

if __name__ == "__main__": main()
