"""Degenerate-reply rate per system on the demo contexts with the embedded model (issue #14, item 6), to compare prompt shapes cheaply.

Runs the evaluation's episodes (director -> speaker -> simulated user, the evaluate stage's sizes in configs/smoke.yaml) for a few systems on the
base model, no adapters: `mascot` here is the untrained MASCOT (base director, base persona speakers: the `mascot-i` spec without its adapter),
`mascot-c` (random order), `mascot-p` (no persona prompting) and the `zero-shot` baseline. Each agent reply is classed by
`mascot.evaluation.auto_metrics.degenerate_reasons` (the GRPO format gate's rule); the rate per system comes with its Wilson 95% interval.
Results go under --label (e.g. `before`, `after`) in --out, beside earlier labels, with the first degenerate replies as examples.

    python bench/prompt_degenerate.py --label after [--splits test] [--systems mascot mascot-c mascot-p zero-shot]
"""

import argparse, asyncio, json, os, subprocess, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
import yaml
from mascot.core.store import read_jsonl
from mascot.domain.dataset_loading import load_contexts
from mascot.domain.episodes import EpisodeConfig, run_episodes_async
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.evaluation.auto_metrics import conversation_from_record, degenerate_reasons
from mascot.training.reward_scorer import wilson_interval

ROOT = Path(__file__).resolve().parent.parent
SPEC = {
    "mascot": "mascot-i"
}  # the untrained MASCOT: base director and base persona speakers (mascot-i without its speaker adapter)
EPISODE_KEYS = (
    "num_turns",
    "enable_user_simulation",
    "enable_big_five",
    "director_max_tokens",
    "speaker_max_tokens",
    "user_max_tokens",
)


def smoke_sizes() -> dict:
    cfg = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    ev = cfg["stages"]["evaluate"]
    return {
        "dataset": cfg["dataset"],
        "data_path": cfg["data_path"],
        "model_name": cfg["model_name"],
        "seed": cfg["seed"],
        **{k: ev[k] for k in EPISODE_KEYS if k in ev},
    }


def summarise(path: Path) -> dict:
    reasons = [r for rec in read_jsonl(path) for r in degenerate_reasons(conversation_from_record(rec))]
    bad = [r for r in reasons if r]
    examples = [
        t.response
        for rec in read_jsonl(path)
        for conv in [conversation_from_record(rec)]
        for t, r in zip(conv.turns, degenerate_reasons(conv))
        if r
    ][:3]
    n = len(reasons)
    return {
        "n_replies": n,
        "n_degenerate": len(bad),
        "rate": len(bad) / n if n else None,
        "ci95": wilson_interval(len(bad), n) if n else None,
        "reasons": {k: bad.count(k) for k in sorted(set(bad))},
        "examples": examples,
    }


async def run(a) -> dict:
    sizes = smoke_sizes()
    contexts = [
        c
        for s in a.splits
        for c in load_contexts(sizes["dataset"], split=s, data_path=sizes["data_path"], num_samples=None)
    ]
    embedded = EmbeddedBackend(sizes["model_name"])
    out = Path(tempfile.mkdtemp(prefix="prompt_degenerate_"))
    common = {k: v for k, v in sizes.items() if k in EpisodeConfig.model_fields}
    cfgs = {
        s: EpisodeConfig(**common, system=SPEC.get(s, s), output_dir=str(out), output_name=s, progress=False)
        for s in a.systems
    }
    paths = await asyncio.gather(*[run_episodes_async(c, contexts=contexts, embedded=embedded) for c in cfgs.values()])
    return {
        "sizes": {**sizes, "splits": a.splits, "num_contexts": len(contexts)},
        "systems": {s: summarise(p) for s, p in zip(cfgs, paths)},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True)
    p.add_argument("--splits", nargs="+", default=["test"])
    p.add_argument("--systems", nargs="+", default=["mascot", "mascot-c", "mascot-p", "zero-shot"])
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "prompt_degenerate.json"))
    a = p.parse_args()
    t = time.time()
    res = asyncio.run(run(a))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = bool(
        subprocess.run(
            ["git", "status", "--porcelain", "nbs", "mascot"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    res.update(seconds=round(time.time() - t, 1), git_commit=commit + ("+uncommitted" if dirty else ""))
    out = Path(a.out)
    allres = json.loads(out.read_text()) if out.exists() else {}
    allres[a.label] = res
    out.write_text(json.dumps(allres, indent=2, ensure_ascii=False) + "\n")
    for s, r in res["systems"].items():
        print(
            f"{a.label:8s} {s:10s} {r['n_degenerate']:3d}/{r['n_replies']:3d} = {r['rate']:.2f}  CI {r['ci95'][0]:.2f}-{r['ci95'][1]:.2f}  {r['reasons']}"
        )
    print(f"{res['seconds']} s")


if __name__ == "__main__":
    main()
