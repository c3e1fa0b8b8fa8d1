"""Learning checks on signals the model can learn, at CPU sizes; resumable section by section.

Every section checks that a trainer learns a signal whose answer is known (known-label reward-model pairs, reply length and format, the
turn-taking reward, a programmatic group reward). None of them is evidence about MASCOT: a passing check says the plumbing and the optimiser
can move the model toward a known target, not that the trained system is better. `bench/director_strategy.py` is the director check whose
target is what human supporters chose next (ESConv strategies).

reward_model: a persona reward model on known-label pairs (each context's real reply vs its degraded copies: the context parroted, the
    persona's name alone, the reply cut off, another conversation's reply), held-out accuracy on unseen contexts with its binomial 95% CI.
    The contexts: the shipped ESConv and ED samples (56 with a reference reply of 6+ words), 31 of them held out (--stage1-holdout 0.55).
    Each *training* context also gets --rm-hard-negatives (2) pairs whose rejected reply is another training context's real reply: only the
    context tells them apart. The held-out pairs are the same with or without them (the same split of the same context ids).
speaker: speaker GRPO (the package's train_speaker, gated reward) against that reward model on the same contexts' persona prompts; held-out
    prompts sampled at the training temperature, several samples each, the same seeds for base and trained: paired difference +- s.e. and the
    degenerate-reply rate of each. The held-out split and seeds follow --stage1-seed. `ungated` scores the held-out replies again with the
    reward model alone beside the gated score (the gate moves every degenerate reply below the clean ones, so the gated difference counts a
    drop in degenerate replies twice).
group_reward_model, director, dpo_director: the stage-2 checks against a programmatic group reward (`mascot.testing.ProgrammaticGroupReward`:
    distinct speakers, 1 - Self-BLEU, MiniLM relevance to the situation, clean replies), a reference judge whose preferences are known and
    learnable. Director states are ESConv and ED contexts (68) after one random-speaker round (so who speaks next can add a new voice); held-out states
    come from unseen contexts. group_reward_model: a group RM trained on conversation pairs that reward labels, held-out accuracy + Wilson CI and the smallest exact McNemar
    p-value the before/after counts allow (per-pair outcomes are not recorded).
    director: the package's train_director_grpo with that reward in place of the trained group RM; dpo_director: the package's
    train_director_dpo on pairs of the base director's sampled directives, both parsed, ranked by that reward. Each is compared on the held-out
    states with a random director and the untrained one (the same rollout seeds), as paired differences +- s.e. The director GRPO counts
    directives cut at the token cap in the loss (the package's default for the director: masked, they left the untrained 135M director, two
    thirds of whose samples run on, almost no gradient).
director_turn_taking: the same GRPO check on one part of that reward alone, distinct speakers, whose optimum is known and depends only on the
    directive: on these states a director that gives the floor to a persona who has not spoken scores 1.0, one that names the persona who
    just spoke 0.5, a random one 0.83 in expectation. With --director-init sft the GRPO director starts from a LoRA SFT'd on the base
    director's own parsed directives for the training states (no reward looked at: the format, not whom to pick), and the result adds the
    paired difference with that start; with --director-init sft_balanced each of those directives is a target once per persona name, so the
    start parses and prefers no one (use --sft-epochs 1: the targets are three times as many).
    --director-openings each opens every context once with each persona, so each has just spoken in a third of the states: with random
    openings the training states' last speakers are uneven (split 3: 20, 18, 10 of 48), and naming the rarest everywhere beats random on
    training states (0.79 of that persona's states vs 0.67) while it does not held out; GRPO from the balanced start took that shortcut.
dpo_director_turn_taking: the DPO check on that same one-part reward (pairs of parsed directives, the one that gives the floor to a new voice
    chosen). At 16 sampled directives per training state (--dpo-candidates) it gets about 200 such pairs; at 6 it got 24 and learnt the format only.

At the defaults the seven sections take about 4 hours on 2 cores (each director GRPO check about 20 minutes; the turn-taking DPO check about
40, most of it DPO's 104 steps on ~200 pairs; the four-part DPO check about 2 hours: 16 samples per state give ~435 pairs, ranked on a
continuous reward, so 2 epochs are ~218 steps of ~27 s; --dpo-epochs 1 halves that); --sections runs a subset.

Every section writes its figures into --out as soon as it finishes; a rerun skips the sections already there (--force reruns them).

    python bench/learning.py [--stage1-datasets ESConv ED] [--stage1-holdout 0.55] [--rm-epochs 2] [--rm-hard-negatives 2] [--grpo-steps 20] [--eval-samples 4]
                             [--director-datasets ESConv ED] [--director-contexts 80] [--director-steps 20]
                             [--director-accum 4] [--director-generations 4] [--director-depths 1] [--director-openings random|each] [--director-lr 1e-3] [--director-beta 0.02] [--director-temperature 1.0]
                             [--director-mask-truncated 0] [--director-unparsed 0.0] [--director-format-weight 0.5] [--director-diversity-weight 0]
                             [--director-top-entropy-quantile 1] [--director-init none|sft|sft_balanced] [--dpo-candidates 16]
                             [--work-dir DIR] [--out bench/results/learning.json]
"""

import argparse, asyncio, json, os, random, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.domain.dataset_loading import load_contexts
from mascot.domain.datasets import shared_data_dir
from mascot.training.pairs import save_pairs
from mascot.stage1.speaker_reward_model import RewardModelConfig, train_reward_model
from mascot.testing import known_label_pairs
from mascot.stage1.speaker_grpo import SpeakerGRPOConfig, train_speaker


SAMPLES = {"ESConv": ("esconv", ("train", "valid", "test")), "ED": ("empathetic_dialogues", ("train",))}


def contexts(datasets=("ESConv",)):
    "Every context of the shipped dataset samples (`../shared/data`), all splits: the checks make their own held-out split by context."
    out = []
    for ds in datasets:
        folder, splits = SAMPLES[ds]
        out += [c for s in splits for c in load_contexts(ds, split=s, data_path=str(shared_data_dir() / folder))]
    return out


def accuracy_by_degradation(rm_path, rows: list[dict], held_ids, max_length: int = 256) -> dict:
    "The trained reward model's held-out pairwise accuracy per degradation kind (which copies it still prefers to the real reply)."
    from mascot.training.reward_scorer import RewardModel

    rm = RewardModel.load(rm_path, max_length=max_length)
    held = [r for r in rows if r["context_id"] in set(held_ids)]
    chosen = rm.score([r["prompt"] for r in held], [r["chosen"] for r in held])
    rejected = rm.score([r["prompt"] for r in held], [r["rejected"] for r in held])
    out = {}
    for kind in dict.fromkeys(r["degradation"] for r in held):
        idx = [i for i, r in enumerate(held) if r["degradation"] == kind]
        out[kind] = {"accuracy": sum(chosen[i] > rejected[i] for i in idx) / len(idx), "n": len(idx)}
    return out


def hard_negative_pairs(rows: list[dict], k: int, holdout_fraction: float, seed: int = 0) -> list[dict]:
    """`k` more pairs per *training* context whose rejected reply is another training context's real reply (hard negatives: only the
    context tells them apart). The held-out contexts, and so the held-out pairs, are the ones `train_reward_model` holds out anyway:
    the same split function, fraction and seed on the same context ids."""
    from datasets import Dataset
    from mascot.training.heldout import split_by_context

    _, _, held = split_by_context(
        Dataset.from_dict({"context_id": [r["context_id"] for r in rows]}), holdout_fraction, seed
    )
    first = {r["context_id"]: r for r in reversed(rows)}  # each context's prompt and real reply
    train_ids = sorted(set(first) - set(held))
    rng, out = random.Random(seed), []
    for cid in train_ids:
        for j, other in enumerate(rng.sample([c for c in train_ids if c != cid], k)):
            r = first[cid]
            out.append(
                {
                    **r,
                    "rejected": first[other]["chosen"],
                    "query_id": f"{cid}:other_training_reply:{j}",
                    "degradation": "other_training_reply",
                }
            )
    return out


def section_reward_model(a, work: Path, hard_negatives: int = 0) -> dict:
    rows = known_label_pairs(contexts(a.stage1_datasets))
    known = rows  # the held-out pairs are among these; hard negatives only add training pairs
    if hard_negatives:
        rows = rows + hard_negative_pairs(rows, hard_negatives, a.stage1_holdout, seed=a.stage1_seed)
    (work / "pairs").mkdir(parents=True, exist_ok=True)
    save_pairs(rows, work / "pairs")
    t = time.time()
    out = train_reward_model(
        RewardModelConfig(
            dataset="ESConv",
            data_path=str(work / "pairs"),
            output_dir=str(work / "rm"),
            num_train_epochs=a.rm_epochs,
            max_length=256,
            lora_r=8,
            learning_rate=1e-3,
            per_device_train_batch_size=8,
            holdout_fraction=a.stage1_holdout,
            seed=a.stage1_seed,
        )
    )
    m = json.loads((out / "mascot_metadata.json").read_text())
    return {
        "heldout_accuracy": m["heldout_accuracy_after"],
        "ci95": m["heldout_accuracy_after_ci95"],
        "heldout_accuracy_before": m["heldout_accuracy_before"],
        "heldout_accuracy_by_degradation": accuracy_by_degradation(out, known, m["heldout_contexts"]),
        "hard_negatives_per_training_context": hard_negatives,
        "n_pairs": m["num_heldout_pairs"],
        "n_train_pairs": m["num_train_pairs"],
        "heldout_contexts": len(m["heldout_contexts"]),
        "steps": m["steps"],
        "seconds": round(time.time() - t, 1),
        "path": str(out),
    }


def section_speaker(a, work: Path, rm_path: str) -> dict:
    folder = work / "speaker_prompts"
    folder.mkdir(parents=True, exist_ok=True)
    rows = known_label_pairs(contexts(a.stage1_datasets), kinds=("name_only",))  # one persona prompt per context
    (folder / "candidates.jsonl").write_text(
        "".join(
            json.dumps({"prompt": r["prompt"], "persona": r["persona"], "context_id": r["context_id"]}) + "\n"
            for r in rows
        )
    )
    t = time.time()
    out = train_speaker(
        SpeakerGRPOConfig(
            dataset="ESConv",
            data_path=str(folder),
            reward_model_path=rm_path,
            output_dir=str(work / "llm"),
            max_steps=a.grpo_steps,
            learning_rate=a.grpo_lr,
            max_completion_length=48,
            eval_max_tokens=48,
            eval_samples_per_prompt=a.eval_samples,
            holdout_fraction=a.stage1_holdout,
            lora_r=8,
            seed=a.stage1_seed,  # the held-out split, sampling and seeds follow --stage1-seed like the reward model's
        )
    )
    m = json.loads((out / "mascot_metadata.json").read_text())
    return {
        k: m[k]
        for k in (
            "paired_diff",
            "se",
            "n_prompts",
            "samples_per_prompt",
            "degenerate_rate_base",
            "degenerate_rate_trained",
            "base_mean_rm",
            "trained_mean_rm",
            "steps",
            "prompts_per_step",
        )
    } | {"seconds": round(time.time() - t, 1), "path": str(out), "ungated": speaker_ungated(a, folder, out, rm_path, m)}


def speaker_ungated(a, folder: Path, adapter: Path, rm_path: str, meta: dict) -> dict:
    """The speaker check's held-out replies scored by the reward model alone (ungated) beside the gated score the trainer reports: the gate
    shifts a degenerate reply below every clean one, so the gated difference counts a drop in degenerate replies once as fewer of them and
    again as a higher score. The replies are sampled again with the package's seeds (seed x 100003 + prompt x samples + sample)."""
    import statistics
    from mascot.core.runtime import run_sync
    from mascot.llm.embedded_backend import EmbeddedBackend
    from mascot.llm.types import ChatRequest
    from mascot.stage1.speaker_grpo import PersonaRMReward, speaker_prompts
    from mascot.training.heldout import paired_summary, split_by_context
    from mascot.training.reward_scorer import RewardModel

    _, held, _ = split_by_context(speaker_prompts(folder), a.stage1_holdout, a.stage1_seed)
    prompts, k = list(held["prompt"]), a.eval_samples
    rm, emb = RewardModel.load(rm_path), EmbeddedBackend()
    emb.load_adapter("trained", adapter)

    async def replies(model):
        reqs = [
            ChatRequest(
                p,
                model=model,
                max_tokens=48,
                temperature=meta.get("eval_temperature", 0.7),
                seed=a.stage1_seed * 100_003 + i * k + j,
            )
            for i, p in enumerate(prompts)
            for j in range(k)
        ]
        return [r.text for r in await asyncio.gather(*[emb.chat(q) for q in reqs])]

    flat = [p for p in prompts for _ in range(k)]
    out = {}
    for name, model in (("base", None), ("trained", "trained")):
        texts = run_sync(replies(model))
        for kind, gate in (("ungated", False), ("gated", True)):
            scores = PersonaRMReward(rm, gate=gate)(flat, texts)
            out[f"{name}_{kind}"] = [statistics.fmean(scores[i * k : (i + 1) * k]) for i in range(len(prompts))]
    res = {}
    for kind in ("ungated", "gated"):
        d = paired_summary(out[f"base_{kind}"], out[f"trained_{kind}"])
        res[kind] = {
            "base_mean_rm": statistics.fmean(out[f"base_{kind}"]),
            "trained_mean_rm": statistics.fmean(out[f"trained_{kind}"]),
            "paired_diff": d["paired_diff"],
            "se": d["se"],
        }
    return res | {"n_prompts": len(prompts), "samples_per_prompt": k}


# ---- stage 2: director checks on the programmatic group reward ----
DIRECTOR_EPISODE = dict(
    dataset="ESConv",
    system="mascot-c",
    num_turns=2,
    enable_user_simulation=True,
    user_response_probability=0.5,
    speaker_max_tokens=32,
    user_max_tokens=24,
    seed=0,
    progress=False,
)


def director_runner(embedded):
    from mascot.domain.episodes import EpisodeConfig, EpisodeRunner
    from mascot.llm.client import LLMClient

    cfg = EpisodeConfig(**DIRECTOR_EPISODE)
    return EpisodeRunner(cfg, LLMClient(cfg, embedded=embedded))


def section_director_states(a, work: Path, embedded) -> dict:
    """Director states: each context's opening plus --director-depths steps (mascot-c), as states.jsonl for train_director_grpo.

    --director-openings random: the first step's speaker is the random director's pick. each: every context is opened once by each persona
    (a state per context and persona), so each persona has just spoken in exactly a third of the training states. With random openings of 48
    training states (split 3), The Beacon had spoken last in 10: naming The Beacon everywhere earned 0.79 of the turn-taking reward on
    training states and 0.60 held out (random: 0.67), a shortcut GRPO took in one step from the balanced-name start."""
    from mascot.domain.episodes import new_state
    from mascot.domain.rollouts import state_to_dict
    from mascot.domain.prompts import DEFAULT_ACTION, director_messages, random_directive
    from mascot.core.records import Directive
    from mascot.core.runtime import run_sync

    runner = director_runner(embedded)
    ctxs = contexts(a.director_datasets)[: a.director_contexts]

    async def one(ctx, opener):
        st, out = new_state(runner, ctx), []
        tag = "" if opener is None else f"::{opener.name.split()[-1].lower()}"
        for depth in range(1, max(a.director_depths) + 1):
            if depth == 1 and opener is not None:
                # mascot-c's own draw, discarded, so later steps' rng is where a random opening leaves it
                random_directive(st.rng, runner.roster)
                await runner.step(st, Directive(opener.name, DEFAULT_ACTION, opener.tone))
            else:
                await runner.step(st)
            if depth in a.director_depths:
                out.append(
                    {
                        "state_id": f"{ctx.context_id}{tag}::s{st.steps}",
                        "context_id": ctx.context_id,
                        "step": st.steps,
                        "prompt": director_messages(st.situation, st.turns, runner.roster),
                        "state": state_to_dict(st),
                    }
                )
        return out

    openers = [None] if a.director_openings == "random" else runner.roster.personas

    async def all_():
        jobs = [one(c, o) for c in ctxs for o in openers]
        return [s for states in await asyncio.gather(*jobs) for s in states]

    states = run_sync(all_())
    folder = work / "director_states"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "states.jsonl").write_text("".join(json.dumps(s) + "\n" for s in states))
    return {
        "path": str(folder),
        "n_states": len(states),
        "depths": list(a.director_depths),
        "openings": a.director_openings,
    }


def held_split(states_path: str, a):
    "The held-out contexts train_director_grpo will use (split_by_context with the same fraction and --director-seed)."
    from mascot.stage2.director_rollouts import director_prompts
    from mascot.training.heldout import split_by_context

    train, held, held_ids = split_by_context(director_prompts(states_path), a.holdout_fraction, a.director_seed)
    return [json.loads(s) for s in train["state"]], [json.loads(s) for s in held["state"]], held_ids


def section_group_reward_model(a, work: Path, states_path: str, embedded, reward) -> dict:
    "Conversations continued from every state by random speakers, ranked by the programmatic reward, as group-RM pairs; held-out accuracy."
    from mascot.training.pairs import preference_pairs, save_pairs
    from mascot.domain.rollouts import state_from_dict
    from mascot.training.reward_scorer import trajectory_messages
    from mascot.core.store import read_jsonl
    from mascot.core.runtime import run_sync

    folder = work / "group_pairs"
    if (folder / "pairs.jsonl").exists():
        return train_group_rm(a, work, folder)  # a stopped run's pairs: the rollouts are not redone
    runner = director_runner(embedded)
    states = list(read_jsonl(Path(states_path) / "states.jsonl"))

    async def rollouts(s, k):
        st = state_from_dict(s["state"], runner.roster, seed=f"grm:{s['state_id']}:{k}")
        await runner.step(st)
        return st

    async def all_():
        return list(await asyncio.gather(*[rollouts(s, k) for s in states for k in range(a.grm_rollouts)]))

    ends = run_sync(all_())
    scores = reward.score_states([e.situation for e in ends], [e.turns for e in ends], runner.roster)
    rows = []
    for i, s in enumerate(states):
        eps = ends[i * a.grm_rollouts : (i + 1) * a.grm_rollouts]
        cands = [
            {"text": json.dumps([t.to_dict() for t in e.turns]), "overall": sc}
            for e, sc in zip(eps, scores[i * a.grm_rollouts :])
        ]
        for c, r in preference_pairs(cands, a.grm_margin):
            prompt, chosen = trajectory_messages(eps[c].situation, eps[c].turns, runner.roster)
            _, rejected = trajectory_messages(eps[r].situation, eps[r].turns, runner.roster)
            rows.append(
                {
                    "prompt": prompt,
                    "chosen": chosen,
                    "rejected": rejected,
                    "score_chosen": cands[c]["overall"],
                    "score_rejected": cands[r]["overall"],
                    "persona": "group",
                    "context_id": s["context_id"],
                    "query_id": f"{s['state_id']}:{c}>{r}",
                }
            )
    folder.mkdir(parents=True, exist_ok=True)
    save_pairs(rows, folder)
    return train_group_rm(a, work, folder)


def train_group_rm(a, work: Path, folder: Path) -> dict:
    from mascot.stage2.group_reward_model import GroupRewardModelConfig, train_group_reward_model

    t = time.time()
    out = train_group_reward_model(
        GroupRewardModelConfig(
            dataset="ESConv",
            data_path=str(folder),
            output_dir=str(work / "grm"),
            num_train_epochs=a.rm_epochs,
            max_length=512,
            lora_r=8,
            learning_rate=1e-3,
            per_device_train_batch_size=8,
            holdout_fraction=0.3,
        )
    )
    m = json.loads((out / "mascot_metadata.json").read_text())
    return {
        "heldout_accuracy": m["heldout_accuracy_after"],
        "ci95": m["heldout_accuracy_after_ci95"],
        "heldout_accuracy_before": m["heldout_accuracy_before"],
        "mcnemar_p_at_best": mcnemar_p_at_best(
            m["heldout_accuracy_before"], m["heldout_accuracy_after"], m["num_heldout_pairs"]
        ),
        "n_pairs": m["num_heldout_pairs"],
        "n_train_pairs": m["num_train_pairs"],
        "heldout_contexts": len(m["heldout_contexts"]),
        "rollouts_per_state": a.grm_rollouts,
        "margin": a.grm_margin,
        "steps": m["steps"],
        "seconds": round(time.time() - t, 1),
        "path": str(out),
    }


def mcnemar_p_at_best(before: float, after: float, n: int) -> float:
    """Exact two-sided McNemar p-value of the before/after accuracies on the same n held-out pairs, at the discordance most favourable to a
    difference (no pair right before and wrong after). The per-pair outcomes are not recorded, so this is the smallest p the counts allow."""
    from statsmodels.stats.contingency_tables import mcnemar

    b, c = round(before * n), round(after * n)
    lo, hi = min(b, c), max(b, c)
    return float(mcnemar([[lo, 0], [hi - lo, n - hi]], exact=True).pvalue)


def director_format_sft(a, work: Path, states_path: str, embedded, name: str, balanced: bool = False) -> dict:
    """A format-only start for the GRPO director (--director-init sft): the base director's own directives on the *training* states, sampled
    at temperature 1, those that parse, rewritten as the JSON the prompt asks for, as SFT targets (TRL SFTTrainer, LoRA). No reward is
    looked at, so the start knows the format and whom the base tends to pick, nothing about whom it should.

    balanced (--director-init sft_balanced): each parsed directive once per persona, its name swapped in, so every state's targets name
    each persona equally often. The start then knows the format and picks no one: a random director that parses, whose samples of a
    state differ in name, so GRPO's groups have reward spread from the first step and the name is what sets the advantages."""
    from mascot.core.runtime import run_sync
    from mascot.stage2.group_data import state_from_dict
    from mascot.llm.types import ChatRequest
    from mascot.domain.prompts import director_messages, parse_directive
    from mascot.stage1.sft import SFTStageConfig, train_sft_on_rows
    from mascot.training.provenance import data_hash

    out = work / f"{name}_sft{'_balanced' if balanced else ''}_start"
    states_sha = data_hash(Path(states_path) / "states.jsonl")
    # resumable: a finished start is reused, if it was made from these states
    if (out / "adapter_config.json").exists():
        info = json.loads((out / "start_info.json").read_text())
        if info.get("states_sha256", states_sha) != states_sha:
            raise SystemExit(
                f"{out}: this SFT start was made from other director states than {states_path} (e.g. other --director-openings); "
                "move it away or use another --work-dir"
            )
        return info
    runner = director_runner(embedded)
    train_states, _, _ = held_split(states_path, a)

    async def sample(i, s):
        st = state_from_dict(s, runner.roster)
        msgs = director_messages(st.situation, st.turns, runner.roster)
        r = await embedded.chat(ChatRequest(msgs, n=a.sft_candidates, temperature=1.0, max_tokens=40, seed=10_000 + i))
        parsed = [parse_directive(t, runner.roster) for t in r.texts]
        # each target is the directive the base wrote, in the JSON the prompt asks for: the raw samples run on past it (the SFT on them
        # left a start that parsed 0.31-0.44 of its training samples, about what the base does)
        targets = [d.to_dict() for d in parsed if d is not None]
        if balanced:
            targets = [{**d, "agent_name": n} for d in targets for n in runner.roster.names]
        return [{"prompt": msgs, "completion": [{"role": "assistant", "content": json.dumps(d)}]} for d in targets]

    async def all_():
        return [x for xs in await asyncio.gather(*[sample(i, s) for i, s in enumerate(train_states)]) for x in xs]

    rows = run_sync(all_())
    names = [json.loads(r["completion"][0]["content"])["agent_name"] for r in rows]
    cfg = SFTStageConfig(
        dataset="ESConv",
        output_dir=str(work),
        run_name=out.name,
        num_train_epochs=a.sft_epochs,
        learning_rate=a.grpo_lr,
        per_device_train_batch_size=4,
        lora_r=8,
        seed=a.director_seed,
    )
    t = time.time()
    train_sft_on_rows(
        cfg,
        rows,
        out,
        kind="director",
        data_path=states_path,
        targets="the base director's parsed directives" + (", each once per persona name" if balanced else ""),
    )
    meta = json.loads((out / "mascot_metadata.json").read_text())
    info = {
        "path": str(out),
        "n_train_states": len(train_states),
        "candidates_per_state": a.sft_candidates,
        "balanced_names": balanced,
        "states_sha256": states_sha,
        "epochs": a.sft_epochs,
        "n_examples": len(rows),
        "names": {n: names.count(n) for n in sorted(set(names))},
        "steps": meta["steps"],
        "train_loss": meta["train_loss"],
        "seconds": round(time.time() - t, 1),
    }
    (out / "start_info.json").write_text(json.dumps(info, indent=2))
    return info


def section_director(a, work: Path, states_path: str, reward, name: str = "director", embedded=None) -> dict:
    from mascot.stage2.director_grpo import train_director_grpo
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig

    ep = {
        k: v
        for k, v in DIRECTOR_EPISODE.items()
        if k in ("speaker_max_tokens", "user_max_tokens", "num_turns", "user_response_probability")
    }
    start = (
        director_format_sft(a, work, states_path, embedded, name, balanced=a.director_init == "sft_balanced")
        if a.director_init != "none"
        else None
    )
    t = time.time()
    out = train_director_grpo(
        DirectorGRPOConfig(
            dataset="ESConv",
            episode_dataset_path=states_path,
            group_reward_model_path="programmatic",
            output_dir=str(work / name),
            max_steps=a.director_steps,
            learning_rate=a.director_lr,
            num_generations=a.director_generations,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=a.director_accum,
            mask_truncated_completions=a.director_mask_truncated,
            beta=a.director_beta,
            max_completion_length=40,
            temperature=a.director_temperature,  # training samples and the held-out comparison alike
            horizon=1,
            unparsed_directive_reward=a.director_unparsed,  # "0.0" or "group_mean": the config's type reads either
            reward_weights=[1.0, a.director_format_weight],
            speaker_diversity_weight=a.director_diversity_weight,
            # TRL's top_entropy_quantile: the policy loss only on the highest-entropy tokens (the name is the one fork in a directive)
            trl={"top_entropy_quantile": a.director_top_entropy_quantile}
            if a.director_top_entropy_quantile < 1
            else {},
            seed=a.director_seed,
            eval_samples_per_state=a.eval_samples,
            holdout_fraction=a.holdout_fraction,
            lora_r=8,
            init_adapter_path=start["path"] if start else None,
            **ep,
        ),
        reward=reward,  # the programmatic judge (the known preference of this check) in the group RM's place
    )
    m = json.loads((out / "mascot_metadata.json").read_text())
    r, u = m["paired_diff_vs_random"], m["paired_diff_vs_untrained"]
    return {
        "paired_diff_vs_random": r["paired_diff"],
        "se": r["se"],
        "paired_diff_vs_untrained": u["paired_diff"],
        "se_vs_untrained": u["se"],
        "n_states": r["n_prompts"],
        "samples_per_state": a.eval_samples,
        "steps": m["steps"],
        "prompts_per_step": m["prompts_per_step"],
        **{f"{k}_mean_reward": m[f"heldout_{k}"]["mean_group_reward"] for k in ("random", "untrained", "trained")},
        **{f"{k}_parse_rate": m[f"heldout_{k}"]["parse_rate"] for k in ("untrained", "trained")},
        "max_weight_change": m["max_weight_change"],
        "reward_parts": list(reward.use),
        "seconds": round(time.time() - t, 1),
        "path": str(out),
        **(
            {
                "start": start,
                "paired_diff_vs_start": m["paired_diff_vs_start"]["paired_diff"],
                "se_vs_start": m["paired_diff_vs_start"]["se"],
                "start_mean_reward": m["heldout_start"]["mean_group_reward"],
                "start_parse_rate": m["heldout_start"]["parse_rate"],
            }
            if start
            else {}
        ),
    }


def section_dpo_director(a, work: Path, states_path: str, embedded, reward, name: str = "dpo") -> dict:
    "Pairs of the base director's sampled directives (both parsed, ranked by the reward of their rollouts), DPO, then the held-out comparison."
    from mascot.training.pairs import preference_pairs, save_pairs
    from mascot.core.runtime import run_sync
    from mascot.stage2.director_dpo import DirectorDPOConfig, train_director_dpo
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig
    from mascot.stage2.director_rollouts import rollout_states
    from mascot.stage2.director_heldout import heldout_directors, heldout_director_backend
    from mascot.stage2.group_data import state_from_dict
    from mascot.llm.types import ChatRequest
    from mascot.domain.prompts import director_messages, parse_directive
    from mascot.training.heldout import paired_summary

    runner = director_runner(embedded)
    train_states, held_states, held_ids = held_split(states_path, a)

    async def candidates(i, s):
        st = state_from_dict(s, runner.roster)
        r = await embedded.chat(
            ChatRequest(
                director_messages(st.situation, st.turns, runner.roster),
                n=a.dpo_candidates,
                temperature=1.0,
                max_tokens=40,
                seed=i,
            )
        )
        texts = [t for t in r.texts if parse_directive(t, runner.roster) is not None]
        sts = [
            state_from_dict(s, runner.roster, seed=f"dpo:{i}") for _ in texts
        ]  # one rollout seed per state: the directive is what differs
        ends = await rollout_states(runner, sts, texts, 1, DIRECTOR_EPISODE["num_turns"])
        return s, st, texts, ends

    async def all_():
        return list(await asyncio.gather(*[candidates(i, s) for i, s in enumerate(train_states)]))

    rows, n_parsed, n_sampled = [], 0, 0
    for i, (s, st, texts, ends) in enumerate(run_sync(all_())):
        n_parsed += len(texts)
        n_sampled += a.dpo_candidates
        if len(texts) < 2:
            continue
        scores = reward.score_states([e.situation for e in ends], [e.turns for e in ends], runner.roster)
        cands = [{"text": t, "overall": sc} for t, sc in zip(texts, scores)]
        for c, r in preference_pairs(cands, a.dpo_margin):
            rows.append(
                {
                    "prompt": director_messages(st.situation, st.turns, runner.roster),
                    "chosen": [{"role": "assistant", "content": texts[c]}],
                    "rejected": [{"role": "assistant", "content": texts[r]}],
                    "score_chosen": scores[c],
                    "score_rejected": scores[r],
                    "persona": "director",
                    "context_id": s["context"]["context_id"],
                    "query_id": f"dpo:{i}:{c}>{r}",
                }
            )
    res = {
        "n_train_states": len(train_states),
        "n_pairs": len(rows),
        "candidates_per_state": a.dpo_candidates,
        "base_parse_rate_sampled": n_parsed / max(1, n_sampled),
    }
    if not rows:
        return res | {
            "paired_diff_vs_random": None,
            "se": None,
            "why": "no state had two parsed directives with different rewards",
        }
    folder = work / f"{name}_pairs"
    folder.mkdir(parents=True, exist_ok=True)
    save_pairs(rows, folder)
    t = time.time()
    out = train_director_dpo(
        DirectorDPOConfig(
            dataset="ESConv",
            episode_dataset_path=str(folder),
            output_dir=str(work / name),
            num_train_epochs=a.dpo_epochs,
            lora_r=8,
            learning_rate=a.grpo_lr,
            per_device_train_batch_size=4,
            seed=a.director_seed,
        )
    )
    ecfg = DirectorGRPOConfig(
        dataset="ESConv",
        seed=a.director_seed,
        max_completion_length=40,
        temperature=1.0,
        horizon=1,
        eval_samples_per_state=a.eval_samples,
        num_turns=DIRECTOR_EPISODE["num_turns"],
    )
    backend = heldout_director_backend(runner.client, ecfg.model_name, out)
    random_, untrained, trained = run_sync(
        heldout_directors(runner, reward, held_states, ["random", None, "trained-director"], ecfg, backend)
    )
    r, u = (
        paired_summary(random_["per_state"], trained["per_state"]),
        paired_summary(untrained["per_state"], trained["per_state"]),
    )
    m = json.loads((out / "mascot_metadata.json").read_text())
    return res | {
        "paired_diff_vs_random": r["paired_diff"],
        "se": r["se"],
        "paired_diff_vs_untrained": u["paired_diff"],
        "se_vs_untrained": u["se"],
        "n_states": r["n_prompts"],
        "heldout_contexts": held_ids,
        "samples_per_state": a.eval_samples,
        "steps": m["steps"],
        "random_mean_reward": random_["mean_group_reward"],
        "untrained_mean_reward": untrained["mean_group_reward"],
        "trained_mean_reward": trained["mean_group_reward"],
        "untrained_parse_rate": untrained["parse_rate"],
        "trained_parse_rate": trained["parse_rate"],
        "reward_parts": list(reward.use),
        "seconds": round(time.time() - t, 1),
        "path": str(out),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--stage1-datasets",
        nargs="+",
        default=["ESConv", "ED"],
        choices=list(SAMPLES),
        help="dataset samples whose contexts the reward-model and speaker checks use (ESConv 25 and ED 31 with a reference reply of 6+ words)",
    )
    ap.add_argument(
        "--stage1-holdout",
        type=float,
        default=0.55,
        help="fraction of those contexts held out (0.55 of 56: 31, at least the 30 held-out prompts the speaker check asks for)",
    )
    ap.add_argument("--rm-epochs", type=float, default=2)
    ap.add_argument(
        "--stage1-seed",
        type=int,
        default=0,
        help="seed of the reward-model checks' held-out split, score head and sampling (another seed: another 31 held-out contexts)",
    )
    ap.add_argument(
        "--rm-hard-negatives",
        type=int,
        default=2,
        help="pairs added per training context whose rejected reply is another training context's real reply (hard negatives; 0: none)",
    )
    ap.add_argument("--grpo-steps", type=int, default=20)
    ap.add_argument("--grpo-lr", type=float, default=5e-4)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument(
        "--director-contexts",
        type=int,
        default=80,
        help="contexts for the director states (the first N of --director-datasets)",
    )
    ap.add_argument(
        "--director-datasets",
        nargs="+",
        default=["ESConv", "ED"],
        choices=list(SAMPLES),
        help="dataset samples whose contexts become director states (ESConv 28; with ED, 68)",
    )
    ap.add_argument(
        "--director-openings",
        default="random",
        choices=["random", "each"],
        help="random: the first speaker is the random director's pick (the recorded figures'); each: every context opened once by each persona, "
        "so no one name is a shortcut to the turn-taking reward (three times the states)",
    )
    ap.add_argument("--holdout-fraction", type=float, default=0.3)
    ap.add_argument("--grm-rollouts", type=int, default=3)
    ap.add_argument("--grm-margin", type=float, default=0.05)
    ap.add_argument("--director-steps", type=int, default=20)
    ap.add_argument(
        "--director-accum",
        type=int,
        default=4,
        help="micro-batches of 4 completions per director GRPO step (prompts per step: 4 x this / --director-generations)",
    )
    ap.add_argument(
        "--director-generations", type=int, default=4, help="directives sampled per state in a director GRPO group"
    )
    ap.add_argument(
        "--director-depths",
        type=int,
        nargs="+",
        default=[1],
        help="director states after these many random-speaker steps of each context (1: one persona has spoken; 1 2: both kinds)",
    )
    ap.add_argument("--director-lr", type=float, default=1e-3, help="the director GRPO's learning rate")
    ap.add_argument(
        "--director-beta",
        type=float,
        default=0.02,
        help="the director GRPO's KL weight (TRL's beta; the package's default)",
    )
    ap.add_argument(
        "--director-temperature",
        type=float,
        default=1.0,
        help="the director GRPO's sampling temperature, in training and in the held-out comparison (above 1: more names to compare within a state)",
    )
    ap.add_argument(
        "--director-mask-truncated",
        type=int,
        default=0,
        help="1: directives cut at the 40-token cap are left out of the GRPO loss (TRL's mask_truncated_completions); 0: they count",
    )
    ap.add_argument(
        "--director-unparsed",
        default="0.0",
        help="reward of a director GRPO directive that does not parse (the package's unparsed_directive_reward): a number, or group_mean "
        "(its group's mean parsed reward: zero rollout advantage, so the format and the name choice are not learnt from one signal)",
    )
    ap.add_argument(
        "--director-format-weight",
        type=float,
        default=0.5,
        help="the director GRPO's weight of the directive-format reward (the rollout reward's is 1.0; the package's default 0.5)",
    )
    ap.add_argument(
        "--director-diversity-weight",
        type=float,
        default=0.0,
        help="the director GRPO's weight of the within-group speaker-diversity bonus (the package's speaker_diversity_weight; 0: off)",
    )
    ap.add_argument(
        "--director-top-entropy-quantile",
        type=float,
        default=1.0,
        help="the director GRPO's policy loss only on this top fraction of completion tokens by entropy (TRL's top_entropy_quantile; 1: all tokens)",
    )
    ap.add_argument(
        "--director-init",
        choices=["none", "sft", "sft_balanced"],
        default="none",
        help="the GRPO director's start: none, a fresh LoRA on the base; sft, a LoRA SFT'd on the base's own parsed directives for the "
        "training states (no reward looked at), so the format is there from step one; sft_balanced, the same with each directive once per "
        "persona name (the format, and no preferred name); the result then adds paired_diff_vs_start",
    )
    ap.add_argument(
        "--sft-candidates",
        type=int,
        default=8,
        help="directives the base samples per training state for --director-init sft",
    )
    ap.add_argument("--sft-epochs", type=float, default=2, help="epochs of the --director-init sft start")
    ap.add_argument(
        "--director-seed",
        type=int,
        default=0,
        help="seed of the director checks' held-out split (by context), sampling and rollouts: another seed is a replication on other held-out states",
    )
    ap.add_argument(
        "--dpo-candidates",
        type=int,
        default=16,
        help="directives the base director samples per training state for the DPO pairs (about a third parse; 16 gave 205 turn-taking pairs, 6 gave 24)",
    )
    ap.add_argument("--dpo-margin", type=float, default=0.05)
    ap.add_argument("--dpo-epochs", type=float, default=2)
    ap.add_argument(
        "--sections",
        nargs="+",
        default=[
            "reward_model",
            "speaker",
            "group_reward_model",
            "director",
            "dpo_director",
            "director_turn_taking",
            "dpo_director_turn_taking",
        ],
    )
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--out", default="bench/results/learning.json")
    ap.add_argument("--force", action="store_true", help="rerun the sections already in --out")
    a = ap.parse_args()
    out = Path(a.out)
    res = json.loads(out.read_text()) if out.exists() and not a.force else {}
    work = Path(a.work_dir or res.get("work_dir") or tempfile.mkdtemp(prefix="learning_"))
    res.update(work_dir=str(work))
    res.setdefault("settings", vars(a))  # the first run's; each later section records its own under settings_by_section

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2))

    res.setdefault("settings_by_section", {})

    def todo(
        name,
    ):  # absent, recorded as not measured (a stopped run), or its files are gone (director states of another machine)
        r = res.get(name)
        return (
            r is None
            or r.get("measured") is False
            or (
                name == "director_states"
                and (
                    not Path(r["path"], "states.jsonl").exists()
                    or r.get("depths", [1]) != a.director_depths
                    or r.get("openings", "random") != a.director_openings
                )
            )
        )

    def run(name, fn, needed=False):
        if (needed or name in a.sections) and todo(name):
            res[name] = fn()
            res["settings_by_section"][name] = vars(a)
            save()
            print(name, res[name], flush=True)

    run("reward_model", lambda: section_reward_model(a, work, hard_negatives=a.rm_hard_negatives))
    run("speaker", lambda: section_speaker(a, work, res["reward_model"]["path"]))
    stage2 = ("group_reward_model", "director", "dpo_director", "director_turn_taking", "dpo_director_turn_taking")
    if any(s in a.sections and todo(s) for s in stage2):
        from mascot.llm.embedded_backend import EmbeddedBackend
        from mascot.testing import ProgrammaticGroupReward

        embedded, reward = EmbeddedBackend(), ProgrammaticGroupReward()
        run("director_states", lambda: section_director_states(a, work, embedded), needed=True)
        states = res["director_states"]["path"]
        run("group_reward_model", lambda: section_group_reward_model(a, work, states, embedded, reward))
        run("director", lambda: section_director(a, work, states, reward, embedded=embedded))
        run("dpo_director", lambda: section_dpo_director(a, work, states, embedded, reward))
        turn_taking = ProgrammaticGroupReward(use=["distinct_speakers"])
        run(
            "director_turn_taking",
            lambda: section_director(a, work, states, turn_taking, name="director_turn_taking", embedded=embedded),
        )
        run(
            "dpo_director_turn_taking",
            lambda: section_dpo_director(a, work, states, embedded, turn_taking, name="dpo_turn_taking"),
        )
    save()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
