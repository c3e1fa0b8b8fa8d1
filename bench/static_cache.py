"""The embedded backend's key/value cache, preallocated (`StaticCache`, the default) against grown step by step (`DynamicCache`,
which `generate` otherwise uses and which concatenates every layer's whole cache at every decode step), alternated in one process on
the same model and the same requests:

* judge: 16 judge calls of the judge stage (the real persona rubric with one worked example; greedy, logprobs), 80 new tokens;
* speakers: 8 sampled speaker-sized calls (persona system prompt and a short history), 36 new tokens;
* small: 4 of those, 36 new tokens (the episode stages' usual batch).

    python bench/static_cache.py [--reps 2] [--fp32] [--avx2]

`--avx2` keeps torch, oneDNN and MKL to AVX2 kernels and serves in fp32, as on a CPU without AVX-512 or bf16 units. Writes
bench/results/static_cache[-fp32|-avx2].json: per workload and cache, the decode and prefill seconds (the backend's own counters),
decode milliseconds per step, and whether the greedy texts matched. One run on a shared machine: read the ratios.
"""

import argparse, asyncio, json, os, time

from pipeline_profile import (
    AVX2_ENV,
)  # the ISA caps of an AVX2-only CPU (this folder is on sys.path when run as a script)


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2, help="alternations of the two caches per workload")
    ap.add_argument("--fp32", action="store_true", help="serve in float32 (as on a CPU without bf16 units)")
    ap.add_argument("--avx2", action="store_true", help="AVX2 kernels only, and fp32 (a CPU without AVX-512 or bf16)")
    ap.add_argument("--out-dir", default="bench/results")
    return ap.parse_args()


def speaker_requests(n: int, max_tokens: int = 36):
    import random
    from mascot.llm.types import ChatRequest
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.domain.prompts import random_directive, speaker_messages

    topics = [
        "my exam",
        "my sister",
        "a job interview",
        "my dog",
        "moving house",
        "my old friend",
        "the rent",
        "a long week",
    ]
    return [
        ChatRequest(
            speaker_messages(
                SUPPORT_ROSTER.personas[i % 3],
                random_directive(random.Random(i), SUPPORT_ROSTER),
                f"I keep worrying about {topics[i % len(topics)]}. I can't sleep and I don't know what to do.",
                [],
                SUPPORT_ROSTER,
            ),
            max_tokens=max_tokens,
            temperature=0.7,
            seed=i,
        )
        for i in range(n)
    ]


async def measure(emb, reqs):
    from mascot.llm.embedded_backend import embedded_stats

    before = embedded_stats()
    t = time.perf_counter()
    out = await asyncio.gather(*[emb.chat(r) for r in reqs])
    wall = time.perf_counter() - t
    after = embedded_stats()
    d = {k: after[k] - before[k] for k in ("decode_s", "prefill_s", "new_tokens", "generate_calls")}
    steps = max(
        max(r.completion_tokens for r in out) - 1, 1
    )  # decode steps of the batch: its longest row, less the prefill's token
    return {
        "wall_s": round(wall, 2),
        "decode_s": round(d["decode_s"], 2),
        "prefill_s": round(d["prefill_s"], 2),
        "decode_ms_per_step": round(1000 * d["decode_s"] / steps, 1),
        "generate_calls": d["generate_calls"],
        "texts": [r.text for r in out],
    }


def main():
    a = parse()
    if a.avx2:
        os.environ.update(AVX2_ENV)  # before torch is imported
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from pathlib import Path
    from mascot.llm.embedded_backend import EmbeddedBackend
    from embedded_batching import judge_requests

    emb = EmbeddedBackend(dtype="float32" if (a.fp32 or a.avx2) else "auto").load()
    work = {"judge": judge_requests(16, 80), "speakers": speaker_requests(8), "small": speaker_requests(4)}
    res = {
        "dtype": emb.dtype,
        "isa": {k: os.environ.get(k) for k in AVX2_ENV},
        "cpus": os.cpu_count(),
        "reps": a.reps,
        "workloads": {},
    }

    async def go():
        await measure(emb, speaker_requests(2, 4))  # warm-up
        for name, reqs in work.items():
            runs = {"static": [], "dynamic": []}
            for _ in range(a.reps):
                for cache in ("dynamic", "static"):
                    emb.kv_cache = cache
                    runs[cache].append(await measure(emb, reqs))
                    print(name, cache, {k: v for k, v in runs[cache][-1].items() if k != "texts"}, flush=True)
            med = lambda c, k: sorted(r[k] for r in runs[c])[len(runs[c]) // 2]
            res["workloads"][name] = {
                "rows": len(reqs),
                "max_tokens": reqs[0].max_tokens,
                "greedy": reqs[0].temperature == 0,
                "same_texts": all(s["texts"] == d["texts"] for s, d in zip(runs["static"], runs["dynamic"])),
                **{c: [{k: v for k, v in r.items() if k != "texts"} for r in runs[c]] for c in runs},
                "decode_ratio_dynamic_over_static": round(med("dynamic", "decode_s") / med("static", "decode_s"), 3),
            }
        emb.kv_cache = "static"

    asyncio.run(go())
    suffix = "-avx2" if a.avx2 else ("-fp32" if a.fp32 else "")
    out = Path(a.out_dir) / f"static_cache{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v["decode_ratio_dynamic_over_static"] for k, v in res["workloads"].items()}), "->", out)


if __name__ == "__main__":
    main()
