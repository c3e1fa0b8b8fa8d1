"""How much a director adapter conditions on who has spoken, read off its next-token probabilities (no sampling, no rollouts).

For each director state, the prompt the director sees plus the start of its answer (PREFIX, e.g. '{"agent_name": "The'); the probabilities of
the three personas' first name tokens, renormalised; P(a persona who has not spoken yet) averaged over the training and held-out states
(bench/learning.py's split), how often each persona is the top name, and the mean top probability and entropy of the three (how far a
state's samples can differ in name: GRPO compares nothing where they cannot). The read-offs quoted for `dpo_director_turn_taking` and the GRPO
turn-taking runs in bench/results/learning.json come from this.

    python bench/director_probe.py STATES_DIR ADAPTER|base [--prefix '{"agent_name": "The'] [--holdout-fraction 0.3] [--seed 0]
"""

import argparse, sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("states", help="a director_states folder of bench/learning.py (states.jsonl)")
    ap.add_argument("adapter", help="a director adapter folder, or base")
    ap.add_argument(
        "--prefix", default='{"agent_name": "The', help="the start of the director's answer, up to the name"
    )
    ap.add_argument("--holdout-fraction", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0, help="the split seed (bench/learning.py --director-seed)")
    a = ap.parse_args()
    import torch
    from learning import held_split
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig
    from mascot.stage2.group_data import state_from_dict
    from mascot.domain.prompts import director_messages
    from mascot.domain.personas import roster_for_dataset
    from mascot.training.models import load_causal_lm

    train, held, _ = held_split(a.states, SimpleNamespace(holdout_fraction=a.holdout_fraction, director_seed=a.seed))
    roster = roster_for_dataset("ESConv")
    model, tok = load_causal_lm(DirectorGRPOConfig(dataset="ESConv").model_name)
    model = model.float()
    if a.adapter != "base":
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, a.adapter)
    model.eval()
    first = [tok(" " + n.split(" ", 1)[1], add_special_tokens=False).input_ids[0] for n in roster.names]

    def probe(states):
        unheard, top, p_top, entropy = [], dict.fromkeys(roster.names, 0), [], []
        with torch.no_grad():
            for s in states:
                st = state_from_dict(s, roster)
                text = tok.apply_chat_template(
                    director_messages(st.situation, st.turns, roster), tokenize=False, add_generation_prompt=True
                )
                logits = model(tok(text + a.prefix, return_tensors="pt").input_ids).logits[0, -1]
                p = torch.softmax(logits.float(), -1)[first]
                p = p / p.sum()
                spoke = {t.agent_name for t in st.turns if t.turn_type != "user"}
                unheard.append(float(sum(p[i] for i, n in enumerate(roster.names) if n not in spoke)))
                top[roster.names[int(p.argmax())]] += 1
                p_top.append(float(p.max()))
                entropy.append(float(-(p * p.clamp_min(1e-12).log()).sum()))
        mean = lambda xs: round(sum(xs) / len(xs), 3)  # noqa: E731
        # p_top and the entropy (nats; log 3 = 1.099 for three equally likely names) say how much a state's samples can differ in name
        return {
            "p_not_yet_heard": mean(unheard),
            "top_name": top,
            "mean_p_top": mean(p_top),
            "mean_name_entropy": mean(entropy),
            "n_states": len(states),
        }

    print({"adapter": a.adapter, "train": probe(train), "heldout": probe(held)})


if __name__ == "__main__":
    main()
