"""Stage 2 learning signal on the embedded model (not part of the default tests).

Independent episodes -> group reward model; branching states -> director GRPO (online rollouts) and director DPO. Then, on held-out states
(contexts no director trained on), the group reward of rollouts directed by: random order (MASCOT-C), the untrained director, the GRPO director,
the DPO director — same states, speakers and random streams. Writes bench/results/stage2_learning.json.

    python bench/stage2_learning.py [--num-samples 12] [--grpo-steps 20] [--eval-seeds 3] [--work-dir DIR]
"""

import argparse, asyncio, json, os, statistics, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.domain.datasets import shared_data_dir
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.stage2.group_data import GroupDataConfig, generate_group_async
from mascot.stage2.group_reward_model import GroupRewardModelConfig, train_group_reward_model
from mascot.training.reward_scorer import GroupRewardModel
from mascot.stage2.director_grpo import train_director_grpo
from mascot.stage2.director_grpo_config import DirectorGRPOConfig
from mascot.stage2.director_rollouts import director_prompts
from mascot.stage2.director_heldout import director_group_reward
from mascot.stage2.director_dpo import DirectorDPOConfig, train_director_dpo
from mascot.training.heldout import split_by_context
from mascot.domain.episodes import EpisodeRunner
from mascot.llm.client import LLMClient


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-samples", type=int, default=12)
    ap.add_argument("--grpo-steps", type=int, default=20)
    ap.add_argument("--num-turns", type=int, default=3)
    ap.add_argument("--score-margin", type=float, default=0.1)
    ap.add_argument("--grpo-lr", type=float, default=2e-4)
    ap.add_argument(
        "--eval-seeds", type=int, default=3, help="held-out rollouts per state and director (paired across directors)"
    )
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--out", default="bench/results/stage2_learning.json")
    a = ap.parse_args()
    work = Path(a.work_dir or tempfile.mkdtemp(prefix="stage2_"))
    emb = EmbeddedBackend()
    base = dict(
        dataset="ESConv",
        data_path=str(shared_data_dir() / "esconv"),
        split="train",
        num_samples=a.num_samples,
        num_turns=a.num_turns,
        output_dir=str(work / "rl"),
        progress=True,
        speaker_max_tokens=40,
        user_max_tokens=28,
        score_margin=a.score_margin,
        judge_provider="embedded",
    )
    res, t = {"settings": vars(a), "work_dir": str(work)}, time.time()
    grp = asyncio.run(
        generate_group_async(GroupDataConfig(**base, num_episodes=3, resume=(work / "rl").exists()), embedded=emb)
    )
    br = asyncio.run(
        generate_group_async(
            GroupDataConfig(**base, generation_mode="branching", num_candidates=4, resume=(work / "rl").exists()),
            embedded=emb,
        )
    )
    res["data_seconds"] = round(time.time() - t, 1)
    grm_dir = train_group_reward_model(
        GroupRewardModelConfig(
            data_path=str(grp), output_dir=str(work / "rm"), num_train_epochs=3, holdout_fraction=0.25
        )
    )
    m = json.loads((grm_dir / "mascot_metadata.json").read_text())
    res["group_reward_model"] = {
        k: m[k] for k in ("heldout_accuracy_before", "heldout_accuracy_after", "num_train_pairs", "num_heldout_pairs")
    }
    print(res["group_reward_model"], flush=True)
    gcfg = DirectorGRPOConfig(
        episode_dataset_path=str(br),
        group_reward_model_path=str(grm_dir),
        output_dir=str(work / "llm"),
        max_steps=a.grpo_steps,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=48,
        num_turns=a.num_turns,
        horizon=1,
        speaker_max_tokens=32,
        user_max_tokens=24,
        holdout_fraction=0.25,
        learning_rate=a.grpo_lr,
    )
    t = time.time()
    grpo = train_director_grpo(gcfg, embedded=emb)
    res["grpo_seconds"] = round(time.time() - t, 1)
    dpo = train_director_dpo(
        DirectorDPOConfig(
            episode_dataset_path=str(br), output_dir=str(work / "llm"), num_train_epochs=2, holdout_fraction=0.25
        )
    )
    # held-out states: the same context split the GRPO run used
    prompts = director_prompts(br)
    _, held, held_ids = split_by_context(prompts, gcfg.holdout_fraction, gcfg.seed)
    states = [json.loads(s) for s in held["state"]]
    emb.load_adapter("grpo-director", grpo)
    emb.load_adapter("dpo-director", dpo)
    ecfg = gcfg.episode_config()
    runner = EpisodeRunner(ecfg, LLMClient(ecfg, embedded=emb))
    grm = GroupRewardModel.load(grm_dir)
    directors = ("random", None, "grpo-director", "dpo-director")

    async def compare(seed):
        return [
            await director_group_reward(runner, grm, states, d, gcfg.horizon, gcfg.num_turns, 48, seed=seed)
            for d in directors
        ]

    # every director is rolled out from the same states with the same random streams, once per evaluation seed: paired comparisons
    per_seed = [asyncio.run(compare(s)) for s in range(1, a.eval_seeds + 1)]
    rows = []
    for j, d in enumerate(directors):
        scores = [x for seed_rows in per_seed for x in seed_rows[j]["scores"]]
        rows.append(
            {
                "director": per_seed[0][j]["director"],
                "mean_group_reward": statistics.fmean(scores),
                "std": statistics.pstdev(scores),
                "parse_rate": statistics.fmean(r[j]["parse_rate"] for r in per_seed),
                "n": len(scores),
            }
        )

    def paired(j, k):  # mean per-rollout difference director j - director k, with its standard error
        diffs = [x - y for r in per_seed for x, y in zip(r[j]["scores"], r[k]["scores"])]
        return {
            "mean_diff": statistics.fmean(diffs),
            "stderr": statistics.pstdev(diffs) / len(diffs) ** 0.5,
            "n": len(diffs),
            "wins": sum(d > 0 for d in diffs),
            "losses": sum(d < 0 for d in diffs),
        }

    res["heldout"] = {
        "contexts": held_ids,
        "states": len(states),
        "eval_seeds": a.eval_seeds,
        "directors": rows,
        "grpo_minus_random": paired(2, 0),
        "grpo_minus_untrained": paired(2, 1),
        "dpo_minus_untrained": paired(3, 1),
    }
    for r in rows:
        print(
            f"{r['director']:>14}: mean group reward {r['mean_group_reward']:.4f} ± {r['std']:.4f}  (parse rate {r['parse_rate']:.2f}, n={r['n']})"
        )
    for k in ("grpo_minus_random", "grpo_minus_untrained", "dpo_minus_untrained"):
        print(k, res["heldout"][k])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
