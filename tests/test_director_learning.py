"""Learnability at small size: director SFT learns a content -> persona rule that the prompt does not give away.

Each synthetic state is one user message naming a topic from one of three keyword families, one family per persona; the prompt's
"already spoke" line is the same for every state (nobody spoke), so only the message's content can decide. The training labels are
skewed (2 : 6 : 1), the held-out states balanced. The director's recipe (the speaker name's tokens weighted, the personas balanced) must
reach a balanced accuracy of 0.55 or more on the held-out states (chance: 0.33); the plain recipe (every token alike, the skewed labels as they are, a few steps) names
the majority persona more often and stays lower. The model is the embedded SmolLM2-135M with a short prompt (24 training states, 12 optimiser
steps): the 2-layer random-weight model (MASCOT_TINY_MODEL=1) stays at chance on this rule whatever the recipe (0.33 balanced accuracy after 40
steps at learning rates 2e-3 to 1e-1, LoRA alpha up to 512: its last position barely depends on the message), so this test clears that
variable. The personas are single-token names (Ann, Ben, Cat) and the choice is the name's likelihood after the directive's opening.
GRPO is not trained here: a GRPO pass samples and scores completions every step, which is beyond this test's budget (<= 120 s on 2 cores).
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
