"""The embedded model's batch size: the same 48 requests (a system prompt, a short message, 48 sampled tokens each) decoded as one batch of 48
vs three of 16 (`EmbeddedBackend(max_batch_size=...)`, which `--max-concurrency` sets), alternated in one process.

    python bench/batch_rows.py [--rows 48] [--reps 2] [--fp32]

Writes bench/results/batch_rows[-fp32].json. One run on a shared machine: read the ratio, not the absolute times.
"""

import argparse, asyncio, json, os, platform, statistics, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.llm.types import ChatRequest


def requests(n: int) -> list[ChatRequest]:
    system = "You are a kind, practical supporter who listens first and answers in two sentences. " * 6
    return [
        ChatRequest(
            [
                {"role": "system", "content": system},
                {"role": "user", "content": f"My dog has been ill for {i + 2} days and I am worried. " * 4},
            ],
            temperature=1.0,
            max_tokens=48,
            seed=i,
        )
        for i in range(n)
    ]


async def timed(backend: EmbeddedBackend, n: int) -> float:
    t = time.perf_counter()
    await asyncio.gather(*[backend.chat(r) for r in requests(n)])
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--fp32", action="store_true", help="load in float32 (as on a CPU without bf16 units)")
    a = ap.parse_args()
    sizes, res = (16, a.rows), {}
    for rep in range(a.reps):
        for mbs in sizes:
            b = EmbeddedBackend(max_batch_size=mbs, dtype="float32" if a.fp32 else "auto").load()
            asyncio.run(timed(b, 4))  # warm-up
            warm = dict(b.stats)
            s = asyncio.run(timed(b, a.rows))
            res.setdefault(str(mbs), []).append(
                {
                    "seconds": round(s, 2),
                    "batches": b.batches[1:],
                    **{k: round(b.stats[k] - warm[k], 2) for k in ("prefill_s", "decode_s")},  # the measured call's own
                }
            )
            print(f"rep {rep} max_batch_size {mbs}: {a.rows} rows in {s:.1f} s, batches {b.batches[1:]}", flush=True)
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in res.items()}
    out = {
        "rows": a.rows,
        "dtype": b.dtype,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "runs": res,
        "median_seconds": med,
        "speedup": round(med["16"] / med[str(a.rows)], 2),
    }
    path = Path("bench/results") / f"batch_rows{'-fp32' if a.fp32 else ''}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"speedup {out['speedup']}x; wrote {path}")


if __name__ == "__main__":
    main()
