"""What a row of the embedded model's batch depends on, and what ordering the queue by content costs: the same 12 sampled requests
(seeded, logprobs on) submitted in three arrival orders with the scheduler in arrival order and in canonical (content) order, and three of
them alone, six together and all twelve together, compared token by token:

* order: whether the order in which requests reach the batch scheduler changes a row's tokens or log-probabilities, per arm;
* company: whether the other rows of its batch do (a row alone has no shared prompt prefix to reuse; twelve rows share the chat
  template's header, computed once);
* cost: the seconds of each arm's three rounds, and the time `canonical_key` and the sort take for a 48-row batch of judge-sized prompts.

    python bench/batch_invariance.py [--fp32]

Writes bench/results/batch_invariance[-fp32].json with the machine, commit and date. One run on a shared machine: the sort's cost is
measured on its own, the arms' seconds only show it is lost in the noise.
"""

import argparse, asyncio, json, os, platform, subprocess, sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    f"Tell me something {w} about {t}." for w in ("short", "kind", "odd") for t in ("cats", "rain", "tea", "music")
]


def provenance() -> dict:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("model name")), platform.processor()
    )
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]},
        "commit": git("rev-parse", "--short", "HEAD"),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def request(i: int):
    from mascot.llm.types import ChatRequest

    return ChatRequest([{"role": "user", "content": PROMPTS[i]}], max_tokens=12, temperature=0.8, seed=i, logprobs=True)


def answers(backend, ids: list[int]) -> dict:
    "Each request's text and per-token log-probabilities, the requests submitted at once in the order of `ids`."

    async def go():
        return await asyncio.gather(*[backend.chat(request(i)) for i in ids])

    return {i: (r.texts[0], [t.logprob for t in r.logprobs[0]]) for i, r in zip(ids, asyncio.run(go()))}


def compare(x: dict, y: dict) -> dict:
    shared = sorted(set(x) & set(y))
    return {
        "rows": len(shared),
        "texts_equal": sum(x[i][0] == y[i][0] for i in shared),
        "max_abs_logprob_diff": max(abs(a - b) for i in shared for a, b in zip(x[i][1], y[i][1])),
    }


def sort_cost_ms(rows: int = 48, reps: int = 200) -> float:
    "Milliseconds to key and sort a queue of `rows` judge-sized requests (4,000-character prompts), keys computed afresh each time."
    import time
    from mascot.llm.batching import _Pending, canonical_key
    from mascot.llm.types import ChatRequest

    text = "Rate the reply against the rubric. " * 115
    reqs = [ChatRequest([{"role": "user", "content": f"{text} #{(i * 7) % rows}"}], seed=i) for i in range(rows)]
    t0 = time.perf_counter()
    for _ in range(reps):
        sorted((_Pending(r, None, None, 0.0) for r in reqs), key=canonical_key)
    return (time.perf_counter() - t0) / reps * 1000


def main():
    import time

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--fp32",
        action="store_true",
        help="serve in float32 (default: the embedded default, bf16 where the CPU has bf16 units)",
    )
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from mascot.llm.embedded_backend import EmbeddedBackend

    backend = EmbeddedBackend(max_batch_size=16, dtype="float32" if a.fp32 else "auto")
    n = len(PROMPTS)
    answers(backend, [0])  # the model loaded before any arm is timed
    result = {"dtype": str(backend.model.dtype).removeprefix("torch.")}
    for arm, canonical in (("arrival_order", False), ("canonical_order", True)):
        backend.scheduler.canonical_order = canonical
        t0 = time.perf_counter()
        forward = answers(backend, list(range(n)))
        result[arm] = {
            "order_reversed": compare(forward, answers(backend, list(range(n))[::-1])),
            "order_shuffled": compare(forward, answers(backend, [(i * 5) % n for i in range(n)])),
            "seconds_three_rounds": round(time.perf_counter() - t0, 2),
        }
    result["six_of_twelve"] = compare(forward, answers(backend, list(range(0, n, 2))))
    result["alone"] = compare(forward, {i: answers(backend, [i])[i] for i in (0, 5, 11)})
    result["sort_ms_48_judge_rows"] = round(sort_cost_ms(), 3)
    out = ROOT / "bench" / "results" / f"batch_invariance{'-fp32' if a.fp32 else ''}.json"
    out.write_text(json.dumps({**provenance(), **result}, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
