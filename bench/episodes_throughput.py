"""Episode throughput on the embedded model at --max-concurrency 1 vs 16, against the backend's own gain from 1 to 16 concurrent requests
(issue #17's target: episodes at 16 gain at least 0.8 x what the backend gains), in one process on one model.

    python bench/episodes_throughput.py [--num-samples 16] [--c1-samples 4] [--num-turns 2] [--fp32] [--data-path ../shared/data/esconv]

Concurrency 1 runs fewer episodes (`--c1-samples`): one at a time, its rate per episode does not depend on how many. The backend's gain is
measured twice: as bench/llm_throughput.py does (short requests, 64 new tokens: 4 one at a time vs 16 at once), and on the episodes' own
requests (every request the concurrency-16 run made, replayed straight to the backend 16 at a time with no episode between them, and the
first --c1-samples x 8 of them one at a time). The replay is the like-for-like bound: the same prompts and token caps, so the only thing
the episodes add is the loop (each role waits for the previous turn), while the short-request figure also differs in workload (episodes'
prompts are hundreds of tokens, whose prefill gains little from batching).
Writes bench/results/episodes_throughput[-fp32].json. One run on a shared machine: read the ratios, not the absolute times.
"""

import argparse, asyncio, json, os, sys, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.domain.episodes import EpisodeConfig, run_episodes_async
from mascot.domain.datasets import shared_data_dir

sys.path.insert(0, str(Path(__file__).parent))
from llm_throughput import embedded_rate


def measure(emb, concurrency, num_samples, a, out_dir):
    cfg = EpisodeConfig(
        dataset="ESConv",
        data_path=a.data_path,
        split="train",
        num_samples=num_samples,
        num_turns=a.num_turns,
        enable_user_simulation=True,
        user_response_probability=0.5,
        max_concurrency=concurrency,
        output_dir=str(out_dir),
        output_name=f"c{concurrency}",
        progress=False,
    )
    emb.batches.clear()
    requests, chat = [], emb.chat

    async def recording_chat(req):
        requests.append(req)
        return await chat(req)

    emb.chat = recording_chat
    t = time.perf_counter()
    try:
        path = asyncio.run(run_episodes_async(cfg, embedded=emb))
    finally:
        del emb.chat  # the instance attribute shadowed the method
    dt = time.perf_counter() - t
    summ = json.loads(next(Path(str(path) + ".runs").glob("*/run_summary.json")).read_text())
    toks = sum(r["completion_tokens"] for r in summ["roles"].values())
    n = sum(1 for _ in open(path))
    return {
        "conversations": n,
        "seconds": round(dt, 2),
        "conversations_per_min": round(60 * n / dt, 2),
        "completion_tokens": toks,
        "tokens_per_s": round(toks / dt, 2),
        "mean_batch": round(sum(emb.batches) / max(1, len(emb.batches)), 2),
        "requests": requests,
    }


def replay(emb, requests, concurrency) -> dict:
    "The same requests straight to the backend, `concurrency` at a time, in the order the episodes made them."
    sem = asyncio.Semaphore(concurrency)

    async def one(req):
        async with sem:
            return await emb.chat(req)

    async def all_():
        return await asyncio.gather(*[one(r) for r in requests])

    emb.batches.clear()
    t = time.perf_counter()
    rs = asyncio.run(all_())
    dt = time.perf_counter() - t
    toks = sum(r.completion_tokens for r in rs)
    return {
        "requests": len(requests),
        "seconds": round(dt, 2),
        "completion_tokens": toks,
        "prompt_tokens": sum(r.prompt_tokens for r in rs),
        "tokens_per_s": round(toks / dt, 2),
        "mean_batch": round(sum(emb.batches) / max(1, len(emb.batches)), 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--c1-samples", type=int, default=4)
    ap.add_argument("--num-turns", type=int, default=2)
    ap.add_argument("--fp32", action="store_true", help="fp32 serving (what a CPU without bf16 units gets)")
    ap.add_argument("--data-path", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    a.data_path = a.data_path or str(shared_data_dir() / "esconv")
    emb = EmbeddedBackend(dtype="float32" if a.fp32 else "auto").load()
    res = {
        "num_samples": a.num_samples,
        "c1_samples": a.c1_samples,
        "num_turns": a.num_turns,
        "dtype": emb.dtype,
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
    }
    backend = {
        c: asyncio.run(embedded_rate(emb, c, n, 64)) for c, n in ((1, 4), (16, 16))
    }  # one at a time: the rate does not depend on how many
    res["backend_tokens_per_s"] = {c: round(v, 2) for c, v in backend.items()}
    res["backend_speedup_16_vs_1"] = round(backend[16] / backend[1], 3)
    print("backend", res["backend_tokens_per_s"], flush=True)
    with tempfile.TemporaryDirectory() as d:
        for c, n in ((1, a.c1_samples), (16, a.num_samples)):
            res[f"concurrency_{c}"] = measure(emb, c, n, a, Path(d))
            print(c, {k: v for k, v in res[f"concurrency_{c}"].items() if k != "requests"}, flush=True)
    requests = res["concurrency_16"].pop("requests")
    res["concurrency_1"].pop("requests")
    res["replay_16"] = replay(emb, requests, 16)
    res["replay_1"] = replay(emb, requests[: a.c1_samples * 8], 1)
    print("replay", res["replay_1"], res["replay_16"], flush=True)
    res["speedup_conversations_per_min"] = round(
        res["concurrency_16"]["conversations_per_min"] / res["concurrency_1"]["conversations_per_min"], 3
    )
    res["speedup_tokens_per_s"] = round(res["concurrency_16"]["tokens_per_s"] / res["concurrency_1"]["tokens_per_s"], 3)
    res["ratio_episode_speedup_vs_backend_speedup"] = round(
        res["speedup_tokens_per_s"] / res["backend_speedup_16_vs_1"], 3
    )
    res["ratio_episodes16_vs_backend16_tokens_per_s"] = round(res["concurrency_16"]["tokens_per_s"] / backend[16], 3)
    # like for like: the backend on the episodes' own requests
    res["replay_speedup_16_vs_1"] = round(res["replay_16"]["tokens_per_s"] / res["replay_1"]["tokens_per_s"], 3)
    res["ratio_episodes16_vs_replay16_tokens_per_s"] = round(
        res["concurrency_16"]["tokens_per_s"] / res["replay_16"]["tokens_per_s"], 3
    )
    res["ratio_episode_speedup_vs_replay_speedup"] = round(
        res["speedup_tokens_per_s"] / res["replay_speedup_16_vs_1"], 3
    )
    res["load_after"] = os.getloadavg()
    out = Path(a.out or f"bench/results/episodes_throughput{'-fp32' if a.fp32 else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print({k: v for k, v in res.items() if k.startswith(("ratio", "speedup"))})


if __name__ == "__main__":
    main()
