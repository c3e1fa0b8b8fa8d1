"""What a director's sampled directives give GRPO to compare: per state, n directives sampled at each temperature, parsed; how many states
have parsed samples that differ in the turn-taking reward (naming a persona who has not spoken against one who has). GRPO learns whom to
pick only from such states: where all of a state's samples name the same persona, its group has no variance in that reward.

    python bench/director_samples.py STATES_DIR [--adapter DIR] [--num-states 24] [--n 8] [--temperatures 1.0 1.5] [--out FILE]

STATES_DIR is a director_states folder of bench/learning.py (states.jsonl). Writes bench/results/director_samples.json by default.
"""

import argparse, asyncio, json, statistics
from pathlib import Path

from mascot.core.store import read_jsonl
from mascot.llm.types import ChatRequest
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.domain.personas import ROSTERS
from mascot.domain.prompts import parse_directive


async def sample(emb: EmbeddedBackend, states: list[dict], n: int, temperature: float, model: str | None) -> dict:
    roster = ROSTERS["support"]
    outs = await asyncio.gather(
        *[
            emb.chat(ChatRequest(s["prompt"], model=model, max_tokens=40, temperature=temperature, n=n, seed=k))
            for k, s in enumerate(states)
        ]
    )
    distinct, new_voice, differ, parsed = [], [], 0, 0
    for s, o in zip(states, outs):
        spoke = {t["agent_name"] for t in s["state"]["turns"] if t.get("turn_type") != "user"}
        names = [d.agent_name for d in (parse_directive(t, roster) for t in o.texts) if d]
        parsed += len(names)
        new_voice += [name not in spoke for name in names]
        if names:
            distinct.append(len(set(names)))
            differ += len({name in spoke for name in names}) > 1
    return {
        "temperature": temperature,
        "parse_rate": round(parsed / (n * len(states)), 3),
        "new_voice_rate": round(statistics.fmean(new_voice), 3) if new_voice else None,
        "mean_distinct_names_per_state": round(statistics.fmean(distinct), 2) if distinct else None,
        "states_with_a_parse": len(distinct),
        "states_whose_samples_differ_in_reward": differ,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("states", help="a director_states folder (states.jsonl)")
    ap.add_argument("--adapter", default=None, help="a director adapter folder (default: the untrained base)")
    ap.add_argument("--num-states", type=int, default=24, help="the first this many states")
    ap.add_argument("--n", type=int, default=8, help="directives sampled per state (GRPO's num_generations)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 1.5])
    ap.add_argument("--out", default="bench/results/director_samples.json")
    a = ap.parse_args()
    states = list(read_jsonl(Path(a.states) / "states.jsonl"))[: a.num_states]
    emb = EmbeddedBackend(dtype="float32", adapters={"director": a.adapter} if a.adapter else None)
    rows = []
    for t in a.temperatures:
        rows.append(asyncio.run(sample(emb, states, a.n, t, "director" if a.adapter else None)))
        print(json.dumps(rows[-1]), flush=True)
    out = {"states": len(states), "n": a.n, "director": a.adapter or "untrained base", "by_temperature": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
