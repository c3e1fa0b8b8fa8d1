"""Training that learns, TRL-style, at tiny sizes: each test trains on a signal whose right answer is known and asserts the learnt behaviour
on held-out data (not "it ran"). These are checks of the trainers and their wiring, not evidence about MASCOT's judges (see bench/learning.py)."""

import json, re, statistics
import pytest

pytestmark = pytest.mark.integration  # each test trains a model on real data (minutes)


def test_reward_model_learns_known_label_pairs(data_dir, tmp_path):
    "A real reply beats its degraded copies (parroted context, name only, cut off, another conversation's reply) more often on held-out contexts."
    from mascot.domain.dataset_loading import load_contexts
    from mascot.training.pairs import save_pairs
    from mascot.stage1.speaker_reward_model import RewardModelConfig, train_reward_model
    from mascot.testing import known_label_pairs

    # the demo's 16 ESConv conversations and ED's 12 training ones: 28 contexts, about 100 pairs
    ctxs = [c for split in ("train", "valid", "test") for c in load_contexts("ESConv", split, data_dir / "esconv")]
    ctxs += load_contexts("ED", "train", data_dir / "empathetic_dialogues")
    rows = known_label_pairs(ctxs)
    (tmp_path / "pairs").mkdir()
    save_pairs(rows, tmp_path / "pairs")
    out = train_reward_model(
        RewardModelConfig(
            dataset="ESConv",
            data_path=str(tmp_path / "pairs"),
            output_dir=str(tmp_path / "rm"),
            num_train_epochs=1,
            max_length=256,
            lora_r=8,
            learning_rate=1e-3,
            per_device_train_batch_size=8,
            holdout_fraction=0.3,
            seed=0,
        )
    )
    meta = json.loads((out / "mascot_metadata.json").read_text())
    print(
        {
            k: meta[k]
            for k in (
                "heldout_accuracy_before",
                "heldout_accuracy_after",
                "heldout_accuracy_after_ci95",
                "num_heldout_pairs",
                "steps",
            )
        }
    )
    assert meta["num_heldout_pairs"] >= 20
    assert meta["heldout_accuracy_after"] >= meta["heldout_accuracy_before"] + 0.2
    assert meta["heldout_accuracy_after_ci95"][0] > 0.5  # better than chance, with its binomial interval
    history = json.loads((out / "log_history.json").read_text())
    assert history[-2]["accuracy"] > history[0]["accuracy"] or history[-2]["loss"] < history[0]["loss"]


def length_reward(texts: list[str], target: int = 3, span: int = 15) -> list[float]:
    """A length target with a known optimum: 1 when the reply's first sentence has `target` words, falling linearly to 0 at `span` words away.
    (Every 135M reply runs past a short completion cap, so the whole reply's length would not vary; its first sentence's does.)"""
    import re

    first = [re.split(r"(?<=[.!?])\s", t.strip(), maxsplit=1)[0] for t in texts]
    return [max(0.0, 1 - abs(len(f.split()) - target) / span) for f in first]


def sampled_reward(model, tok, prompts, seed: int, max_new: int, samples: int = 4) -> list[float]:
    "Per-prompt mean reward of sampled completions (the training sampling), seeded so both models draw from the same random stream."
    import torch

    tok.padding_side = "left"
    torch.manual_seed(seed)
    texts = [
        tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts for _ in range(samples)
    ]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=0.7,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new,
            pad_token_id=tok.pad_token_id,
        )
    r = length_reward(tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True))
    return [statistics.fmean(r[i * samples : (i + 1) * samples]) for i in range(len(prompts))]


def test_grpo_raises_a_learnable_reward_and_trains_only_lora(smol_path, tmp_path):
    """The package's own GRPO config on a length target (a short first sentence): the held-out sampled reward rises, paired over
    prompts by more than 3 s.e.; every LoRA tensor moved and no base tensor did; the run leaves TRL's whole log."""
    import datasets, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import GRPOTrainer
    from mascot.training.configs import lora_config, grpo_config
    from mascot.training.provenance import save_trained
    from mascot.training.heldout import paired_summary
    from mascot.stage1.speaker_grpo import SpeakerGRPOConfig

    set_seed(0)
    tok = AutoTokenizer.from_pretrained(smol_path)
    tok.padding_side = "left"
    topics = "my job,my sister,the exam,my dog,moving city,my health,money,a friend,the holidays,my team".split(",")
    prompt = lambda i: [{"role": "user", "content": f"I feel low about {topics[i % 10]} ({i}). Any thoughts?"}]
    train = datasets.Dataset.from_list([{"prompt": prompt(i)} for i in range(40)])
    held = [prompt(i) for i in range(100, 116)]

    def length_target(completions, **kw):
        return length_reward([c[-1]["content"] for c in completions])

    # 2 prompts x 4 generations per step; truncated completions stay in the loss (most base replies hit the cap, and that is what must change)
    cfg = SpeakerGRPOConfig(
        max_steps=8,
        learning_rate=2e-3,
        num_generations=4,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        max_completion_length=20,
        mask_truncated_completions=False,
        beta=0.0,
        lora_r=8,
        trl={"reward_weights": [1.0]},
    )
    model = AutoModelForCausalLM.from_pretrained(smol_path, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[length_target],
        args=grpo_config(cfg, str(tmp_path / "trainer")),
        train_dataset=train,
        processing_class=tok,
        peft_config=lora_config(cfg, "CAUSAL_LM"),
    )
    before_params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    before = sampled_reward(
        trainer.model, tok, held, seed=1, max_new=20
    )  # LoRA B starts at zero: this is the base model
    trainer.train()
    trainer.model.eval()
    after = sampled_reward(trainer.model, tok, held, seed=1, max_new=20)
    s = paired_summary(before, after)
    print(
        f"held-out length reward {statistics.fmean(before):.3f} -> {statistics.fmean(after):.3f}: paired {s['paired_diff']:+.3f} +- {s['se']:.3f} s.e. "
        f"({s['n_prompts']} prompts x 4 samples)"
    )
    assert s["paired_diff"] > 3 * s["se"] and s["paired_diff"] > 0.05
    now = dict(trainer.model.named_parameters())
    lora = [n for n in before_params if "lora_" in n]
    assert lora and all(not torch.equal(now[n], before_params[n]) for n in lora), [
        n for n in lora if torch.equal(now[n], before_params[n])
    ]
    assert all(torch.equal(now[n], before_params[n]) for n in before_params if "lora_" not in n)
    saved = save_trained(trainer, tok, tmp_path / "out")
    history = json.loads((tmp_path / "out" / "log_history.json").read_text())
    assert {
        "rewards/length_target/mean",
        "completions/clipped_ratio",
        "completions/mean_length",
        "entropy",
        "grad_norm",
    } <= set(history[0])
    assert saved["trainable_parameters"] == sum(before_params[n].numel() for n in lora)
    assert (tmp_path / "out" / "training_curves.png").exists()


# ---------------------------------------------------------------- the director: a target that needs the conversation
NEEDS = {  # what the user asks for decides who should speak; the prompt never says who that is
    "The Anchor": ["I am panicking and cannot stop shaking", "I feel completely overwhelmed and scared right now"],
    "The Catalyst": ["I need a concrete plan with clear steps", "tell me which practical steps to take first"],
    "The Beacon": ["I want to grow and become a better person", "I want to build on my strengths and learn"],
}
TOPICS = "my job,the exams,moving city,my sister,money,my health,my team,a breakup,the new school,my father".split(",")


def _director_state(topic: str, need: str, tok, roster) -> str:
    """A short director prompt (the team and what each brings, one user line carrying the need; no one has spoken), rendered and opened as the
    JSON directive so one word names the speaker. Short, so a GRPO step takes seconds on two cores."""
    team = "; ".join(f"{p.name}: {p.contribution}" for p in roster.personas)
    msgs = [
        {"role": "system", "content": f"You direct a support team. Team: {team}. Pick who speaks next."},
        {"role": "user", "content": f"User, about {topic}: {need}."},
    ]
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + '{"agent_name": "The'


def _named(text: str) -> str | None:
    'The persona a completion of \'... "agent_name": "The\' names (its first word), or None.'
    word = (text.strip().split() or [""])[0].strip('",.').capitalize()
    return f"The {word}" if word in ("Anchor", "Catalyst", "Beacon") else None


def _p_target(model, tok, prompts: list[str], targets: list[str]) -> list[float]:
    "The policy's probability of the right persona among the three, per held-out state (a name-only policy scores 1/3 on balanced states)."
    import torch

    first = {n: tok(" " + n.split()[1], add_special_tokens=False)["input_ids"][0] for n in NEEDS}
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        logits = model(**enc).logits[:, -1].float()
    three = logits[:, [first[n] for n in NEEDS]].softmax(-1)
    return [float(three[i, list(NEEDS).index(t)]) for i, t in enumerate(targets)]


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="a measured negative result: at this size the constrained director's GRPO leaves the held-out probability of the persona "
    "the user's words call for where it was (0.334 -> 0.333, -0.001 +- 0.005 s.e., 18 states), which a name-only policy also reaches; "
    "strict, so a director that learns the content-dependent choice turns this into a failure to be removed",
)
def test_constrained_director_grpo_learns_a_choice_that_needs_the_conversation(tmp_path):
    """The director's GRPO as the package runs it (TRL's GRPOTrainer, the package's LoRA, every sample decoded under the directive's output
    constraint) on states whose right speaker depends on what the user asked for (distress -> The Anchor, a plan -> The Catalyst, growth ->
    The Beacon), all with the same history, at tiny size: every sampled directive names a roster member (asserted), and the held-out
    probability of the right persona rises above what a policy blind to the user's words reaches (the expected failure)."""
    import datasets, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import GRPOTrainer
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.domain.prompts import directive_constraint
    from mascot.llm.embedded_weights import tiny_model
    from mascot.stage2.director_grpo import constrain_generation
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig
    from mascot.training.configs import grpo_config, lora_config
    from mascot.training.heldout import paired_summary

    set_seed(0)
    path = tiny_model()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    states = [(topic, need, who) for topic in TOPICS for who, needs in NEEDS.items() for need in needs]
    train = [s for s in states if s[0] in TOPICS[:7]]
    held = [s for s in states if s[0] in TOPICS[7:]]
    opened = '{"agent_name": "The'
    rows = [
        {"prompt": _director_state(t, n, tok, SUPPORT_ROSTER).removesuffix(opened), "target": w} for t, n, w in train
    ]
    named = []

    def right_speaker(completions, target, **kw):
        # the name where the sample got to it (the cap may cut the JSON after it, or before it: None)
        found = [re.match(r'\s*\{\s*"agent_name"\s*:\s*"(The \w+)"', c) for c in completions]
        names = [m.group(1) if m else None for m in found]
        named.extend(names)
        return [1.0 if n == t else 0.0 for n, t in zip(names, target)]

    cfg = DirectorGRPOConfig(
        max_steps=12,
        learning_rate=1e-2,
        num_generations=6,
        per_device_train_batch_size=12,
        gradient_accumulation_steps=1,
        max_completion_length=16,  # the directive's JSON up to and past the name
        temperature=1.0,
        beta=0.0,
        lora_r=8,
        trl={"reward_weights": [1.0]},
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[right_speaker],
        args=grpo_config(cfg, str(tmp_path / "trainer")),
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tok,
        peft_config=lora_config(cfg, "CAUSAL_LM"),
    )
    constrain_generation(trainer.model, tok, directive_constraint(SUPPORT_ROSTER))
    held_prompts = [_director_state(t, n, tok, SUPPORT_ROSTER) for t, n, _ in held]
    targets = [w for *_, w in held]
    before = _p_target(trainer.model, tok, held_prompts, targets)  # LoRA B starts at zero: the base director
    trainer.train()
    # the constraint (not the expected failure): a random 2-layer model's samples name only roster members, most within the cap
    wrong = [n for n in named if n is not None and n not in SUPPORT_ROSTER.names]
    if len(named) != 12 * 12 or wrong or sum(n is not None for n in named) < len(named) / 2:
        pytest.fail(
            f"constrained samples: {sum(n is not None for n in named)} of {len(named)} reached a name; off the roster: {wrong[:5]}"
        )
    trainer.model.eval()
    after = _p_target(trainer.model, tok, held_prompts, targets)
    s = paired_summary(before, after)
    print(
        f"held-out P(right persona) {statistics.fmean(before):.3f} -> {statistics.fmean(after):.3f} (paired {s['paired_diff']:+.3f} "
        f"+- {s['se']:.3f} s.e., {len(held)} states; any name-only policy: 0.333)"
    )
    assert s["paired_diff"] > 3 * s["se"] and s["paired_diff"] > 0.05
    assert statistics.fmean(after) > 1 / 3 + 0.05  # beyond what any policy blind to the user's words can reach
