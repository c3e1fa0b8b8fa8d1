"""Training that learns, TRL-style, at tiny sizes: each test trains on a signal whose right answer is known and asserts the learnt behaviour
on held-out data (not "it ran"). These are checks of the trainers and their wiring, not evidence about MASCOT's judges (see bench/learning.py)."""

import json, statistics
from pathlib import Path
import pytest


def test_reward_model_learns_known_label_pairs(shared_data_dir, tmp_path):
    "A real reply beats its degraded copies (parroted context, name only, cut off, another conversation's reply) more often on held-out contexts."
    from mascot.domain.datasets import load_contexts
    from mascot.training.pairs import save_pairs
    from mascot.stage1.reward_model import RewardModelConfig, known_label_pairs, train_reward_model

    ctxs = load_contexts("ESConv", split="train", data_path=str(shared_data_dir / "esconv")) + load_contexts(
        "ESConv", split="valid", data_path=str(shared_data_dir / "esconv")
    )
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
    from mascot.training.common import lora_config, save_trained, grpo_config, paired_summary
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
