"""Learnability at small size: director SFT learns a content -> persona rule that the prompt does not give away.

Each synthetic state is one user message naming a topic from one of three keyword families, one family per persona; the prompt's
"already spoke" line is the same for every state (nobody spoke), so only the message's content can decide. The training labels are
skewed (2 : 6 : 1), the held-out states balanced. The director's recipe (the speaker name's tokens weighted, the personas balanced) must
reach a balanced accuracy of 0.55 or more on the held-out states (chance: 0.33); the plain recipe (every token alike, the skewed labels as they are, a few steps) names
the majority persona more often and stays lower. The model is the embedded SmolLM2-135M with a short prompt (24 training states, 12 optimiser
steps): the 2-layer random-weight model (MASCOT_TINY_MODEL=1) stays at chance on this rule whatever the recipe (0.33 balanced accuracy after 40
steps at learning rates 2e-3 to 1e-1, LoRA alpha up to 512: its last position barely depends on the message), so this test clears that
variable. The personas are single-token names (Ann, Ben, Cat) and the choice is the name's likelihood after the directive's opening.
Director GRPO on the same states (`train_director_grpo` with `reward=make_label_reward(...)`, the class-weighted label reward in the
group RM's place) is a measured negative result, kept as a strict expected failure: it samples and scores completions every step, so it
runs some 4 minutes on 2 shared cores (past the 120 s budget), and in 16 steps it stays at chance.
"""

import json, random
from pathlib import Path

import pytest

FAMILIES = {
    "Ann": ["grief", "loss", "funeral", "mourning"],
    "Ben": ["budget", "schedule", "resume", "deadline"],
    "Cat": ["award", "promotion", "medal", "victory"],
}
OPENERS = ["Today", "Honestly", "Lately", "This week", "Right now", "Again"]


def states(n: int, seed: int, weights) -> list[tuple[list[dict], str]]:
    "n (prompt, persona) pairs: the persona drawn with `weights`, the message names one of its family's topics."
    rng, out = random.Random(seed), []
    for _ in range(n):
        name = rng.choices(list(FAMILIES), weights)[0]
        topic = rng.choice(FAMILIES[name])
        msg = f"{rng.choice(OPENERS)}: {topic}"
        line = "Already spoke: nobody. Not heard yet: " + ", ".join(FAMILIES) + "."
        prompt = [{"role": "user", "content": f"User: {msg}\n{line}"}]
        out.append((prompt, name))
    return out


def directive(name: str) -> list[dict]:
    return [{"role": "assistant", "content": json.dumps({"agent_name": name, "action": "go", "tone": "calm"})}]


def balanced_accuracy(pairs) -> float:
    recall = [sum(p == n for p, l in pairs if l == n) / max(1, sum(l == n for _, l in pairs)) for n in FAMILIES]
    return sum(recall) / len(recall)


def train_and_score(tmp_path: Path, **recipe) -> tuple[float, dict]:
    "Director SFT on 24 skewed training states with `recipe`; balanced accuracy and picks on 30 balanced held-out states."
    import yaml
    from collections import Counter
    from peft import PeftModel
    from mascot.stage2.director_sft import DirectorSFTConfig, train_director_sft
    from mascot.training.director_objective import choice_logprobs
    from mascot.training.models import load_causal_lm

    roster = tmp_path / "roster.yaml"
    personas = [
        {"name": n, "role": "r", "contribution": f"answers {fam[0]}", "tone": "calm"} for n, fam in FAMILIES.items()
    ]
    roster.write_text(yaml.safe_dump({"name": "synthetic", "domain": "support", "personas": personas}))
    train, held = states(24, 0, [2, 6, 1]), states(30, 1, [1, 1, 1])
    cfg = DirectorSFTConfig(
        roster_path=str(roster),
        output_dir=str(tmp_path),
        lora_target_modules="all-linear",
        per_device_train_batch_size=4,
        collapse_probe_states=4,
        **recipe,
    )
    out = train_director_sft(cfg, [{"prompt": p, "completion": directive(n)} for p, n in train], tmp_path / "director")
    model, tok = load_causal_lm(cfg.model_name)
    model = PeftModel.from_pretrained(model, out)
    names = list(FAMILIES)
    picks = [
        names[max(range(3), key=row.__getitem__)] for row in choice_logprobs(model, tok, [p for p, _ in held], names)
    ]
    meta = json.loads((out / "mascot_metadata.json").read_text())
    return balanced_accuracy(list(zip(picks, [n for _, n in held]))), {"picks": Counter(picks), "meta": meta}


@pytest.fixture
def embedded(monkeypatch):
    "The embedded SmolLM2-135M even under `make test-fast` (MASCOT_TINY_MODEL=1)."
    monkeypatch.delenv("MASCOT_TINY_MODEL", raising=False)


NEW = dict(decision_weight=5.0, class_balance=True, max_steps=12, learning_rate=1e-3)
PLAIN = dict(decision_weight=1.0, class_balance=False, max_steps=12, learning_rate=1e-3)


@pytest.mark.integration
def test_director_sft_learns_who_speaks_from_content(embedded, tmp_path):
    acc, got = train_and_score(tmp_path, **NEW)
    print(f"director recipe: balanced accuracy {acc:.3f}, picks {dict(got['picks'])}")
    assert acc >= 0.55, (acc, got["picks"])
    watch = got["meta"]["collapse_watch"]  # the collapse watch followed the training and its record says so
    assert watch["probes"][0]["step"] == 0 and watch["probes"][-1]["step"] == NEW["max_steps"]
    assert got["meta"]["label_counts"] and got["meta"]["num_train_rows"] > got["meta"]["num_examples"]


@pytest.mark.integration
@pytest.mark.slow
def test_plain_recipe_stays_at_chance(embedded, tmp_path):
    "The check that the learnability test can fail: every token alike, skewed labels, a few steps."
    acc, got = train_and_score(tmp_path, **PLAIN)
    print(f"plain recipe: balanced accuracy {acc:.3f}, picks {dict(got['picks'])}")
    assert acc < 0.5, (acc, got["picks"])


def grpo_rows(n: int, seed: int, weights) -> list[tuple[dict, str]]:
    """`states` as `train_director_grpo` reads a branching folder's states.jsonl: each row the short prompt (the director's own prompt is
    some 15 times longer, past this test's budget), the state whose opening is the prompt's user message, and its context."""
    from mascot.domain.datasets import Context

    out = []
    for i, (prompt, name) in enumerate(states(n, seed, weights)):
        msg = prompt[0]["content"].split("\n")[0].removeprefix("User: ")
        ctx = Context("ESConv", f"{seed}-{i}", "train", opening=[msg])
        state = {"context": ctx.to_dict(), "turns": [], "round_id": 0, "emotion_trajectory": [], "big_five": None}
        out.append(({"prompt": prompt, "state": state, "context_id": ctx.context_id}, name))
    return out


GRPO = dict(
    max_steps=16,
    learning_rate=1e-3,
    num_generations=6,
    per_device_train_batch_size=12,
    temperature=2.0,
    speaker_diversity_weight=1.0,
)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="a measured negative result: 16 GRPO steps (temperature 2, the diversity bonus at 1.0, learning rate 1e-3) leave the held-out "
    "balanced accuracy at 0.34 (picks Ben 23, Cat 7 of 30), at 2e-3 at 0.33 (Ben 28, Cat 2); at 5e-3 the samples of every group name one persona by step 3 and the "
    "groups stop teaching; strict, so a recipe that learns the rule turns this into a failure to be removed",
)
def test_director_grpo_learns_who_speaks_from_content(embedded, tmp_path):
    """Director GRPO as the package runs it (`train_director_grpo`, every sample under the directive's output constraint), its reward the
    class-weighted label reward (`reward=make_label_reward(...)`, in the group RM's place) on the skewed training states: the held-out
    balanced accuracy of the persona's likelihood (as the SFT test scores it) reaches 0.55 (chance: 0.33)."""
    import yaml
    from collections import Counter
    from peft import PeftModel
    from mascot.domain.personas import load_roster
    from mascot.stage2.director_grpo import train_director_grpo
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig
    from mascot.stage2.director_rewards import make_label_reward
    from mascot.training.director_objective import choice_logprobs
    from mascot.training.models import load_causal_lm

    roster_path = tmp_path / "roster.yaml"
    personas = [
        {"name": n, "role": "r", "contribution": f"answers {fam[0]}", "tone": "calm"} for n, fam in FAMILIES.items()
    ]
    roster_path.write_text(yaml.safe_dump({"name": "synthetic", "domain": "support", "personas": personas}))
    train, held = grpo_rows(24, 0, [2, 6, 1]), grpo_rows(30, 1, [1, 1, 1])
    data = tmp_path / "branching"
    data.mkdir()
    (data / "states.jsonl").write_text("".join(json.dumps(r) + "\n" for r, _ in train))
    cfg = DirectorGRPOConfig(
        dataset="ESConv",
        episode_dataset_path=str(data),
        group_reward_model_path="none: the label reward judges",
        roster_path=str(roster_path),
        output_dir=str(tmp_path),
        run_name="grpo",
        gradient_accumulation_steps=1,
        max_completion_length=12,  # the directive's opening up to and past the name: the label reward reads no further
        beta=0.0,
        lora_r=8,
        lora_target_modules="all-linear",
        format_reward="none",
        holdout_fraction=0.1,
        eval_samples_per_state=1,
        collapse_probe_states=4,
        **GRPO,
    )
    labels = {r["context_id"]: n for r, n in train}
    out = train_director_grpo(cfg, reward=make_label_reward(labels, load_roster(roster_path)))
    model, tok = load_causal_lm(cfg.model_name)
    model = PeftModel.from_pretrained(model, out)
    names = list(FAMILIES)
    rows = choice_logprobs(model, tok, [r["prompt"] for r, _ in held], names)
    picks = [names[max(range(3), key=row.__getitem__)] for row in rows]
    acc = balanced_accuracy(list(zip(picks, [n for _, n in held])))
    meta = json.loads((out / "mascot_metadata.json").read_text())
    print(f"director GRPO: balanced accuracy {acc:.3f}, picks {dict(Counter(picks))}, steps {meta['steps']}")
    assert acc >= 0.55, (acc, Counter(picks))
