"""Shared-prefix reuse in the embedded backend, against itself with reuse off, alternated in one process: 16 judge calls (the real
persona rubric with its worked example: one long shared prefix), the prefix computed once vs re-encoded for every row.

(Rows of different LoRA adapters in one batch are measured by bench/mixed_adapter_batches.py and, on the evaluate stage,
bench/mixed_adapter_evaluate.py.)

    python bench/embedded_batching.py [--reps 2] [--fp32]

Writes bench/results/embedded_batching[-fp32].json. One run on a shared machine: read the ratios, not the absolute times.
"""

import argparse, asyncio, json, os, statistics, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
import mascot.llm.embedded_backend as llm
from mascot.llm.embedded_backend import EmbeddedBackend, embedded_stats
from mascot.llm.types import ChatRequest
from mascot.judging.rubrics import RUBRICS, judge_messages
from mascot.domain.personas import SUPPORT_ROSTER


def judge_requests(n=16, max_tokens=100):
    rubric = next(r for r in RUBRICS.values() if r.kind == "persona" and r.domain == "support")
    persona = SUPPORT_ROSTER.personas[0]
    return [
        ChatRequest(
            judge_messages(
                rubric,
                f"My dog has been ill for {i + 2} days.",
                "User: My dog is ill.",
                f"I am sorry about your dog ({i}). How are you holding up?",
                persona,
                examples=1,
            ),
            max_tokens=max_tokens,
            logprobs=True,
            top_logprobs=20,
        )
        for i in range(n)
    ]


async def run(emb, reqs):
    t = time.perf_counter()
    out = await asyncio.gather(*[emb.chat(r) for r in reqs])
    dt = time.perf_counter() - t
    return dt, sum(r.completion_tokens for r in out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--fp32", action="store_true")
    ap.add_argument("--out-dir", default="bench/results")
    a = ap.parse_args()
    emb = EmbeddedBackend(dtype="float32" if a.fp32 else "auto").load()
    if True:
        res = {"dtype": emb.dtype, "cpus": os.cpu_count(), "reps": a.reps, "judge_prefix": {"on": [], "off": []}}
        default_min = llm.PREFIX_CACHE_MIN_TOKENS
        for rep in range(a.reps):
            for mode in ("on", "off"):
                llm.PREFIX_CACHE_MIN_TOKENS = default_min if mode == "on" else 10**9
                before = embedded_stats()
                dt, toks = asyncio.run(run(emb, judge_requests()))
                after = embedded_stats()
                res["judge_prefix"][mode].append(
                    {
                        "seconds": round(dt, 2),
                        "tokens_per_s": round(toks / dt, 1),
                        "prefill_s": round(after["prefill_s"] - before["prefill_s"], 2),
                        "decode_s": round(after["decode_s"] - before["decode_s"], 2),
                    }
                )
                print("judge prefix", mode, res["judge_prefix"][mode][-1], flush=True)
            llm.PREFIX_CACHE_MIN_TOKENS = default_min
    for k in ("judge_prefix",):
        on = statistics.fmean(x["seconds"] for x in res[k]["on"])
        off = statistics.fmean(x["seconds"] for x in res[k]["off"])
        res[k]["speedup"] = round(off / on, 2)
    out = Path(a.out_dir) / f"embedded_batching{'-fp32' if a.fp32 else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print("speedup:", res["judge_prefix"]["speedup"], "->", out)


if __name__ == "__main__":
    main()
