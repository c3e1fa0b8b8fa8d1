"""Episode throughput on the embedded model: conversations/minute and backend tokens/s at --max-concurrency 1 vs 16.

    python bench/episodes_throughput.py [--num-samples 16] [--num-turns 3] [--data-path ../shared/data/esconv]

Writes bench/results/episodes_throughput.json.
"""
import argparse, asyncio, json, os, tempfile, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.llm import EmbeddedBackend
from mascot.episodes import EpisodeConfig, run_episodes_async
from mascot.data import shared_data_dir

def measure(emb, concurrency, a, out_dir):
    cfg = EpisodeConfig(dataset="ESConv", data_path=a.data_path, split="train", num_samples=a.num_samples, num_turns=a.num_turns,
                        enable_user_simulation=True, user_response_probability=0.5, max_concurrency=concurrency,
                        output_dir=str(out_dir), output_name=f"c{concurrency}", progress=False)
    t = time.perf_counter()
    path = asyncio.run(run_episodes_async(cfg, embedded=emb))
    dt = time.perf_counter() - t
    summ = json.loads(next(Path(str(path) + ".runs").glob("*/run_summary.json")).read_text())
    toks = sum(r["completion_tokens"] for r in summ["roles"].values())
    n = sum(1 for _ in open(path))
    return {"conversations": n, "seconds": round(dt, 2), "conversations_per_min": round(60 * n / dt, 2), "completion_tokens": toks,
            "tokens_per_s": round(toks / dt, 2), "mean_batch": round(sum(emb.batches) / max(1, len(emb.batches)), 2)}

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-samples", type=int, default=16); ap.add_argument("--num-turns", type=int, default=3)
    ap.add_argument("--data-path", default=None); ap.add_argument("--out", default="bench/results/episodes_throughput.json")
    a = ap.parse_args()
    a.data_path = a.data_path or str(shared_data_dir() / "esconv")
    emb = EmbeddedBackend().load()
    res = {"num_samples": a.num_samples, "num_turns": a.num_turns, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as d:
        for c in (1, 16):
            emb.batches.clear()
            res[f"concurrency_{c}"] = measure(emb, c, a, Path(d))
            print(c, res[f"concurrency_{c}"], flush=True)
    res["speedup_conversations_per_min"] = round(res["concurrency_16"]["conversations_per_min"] / res["concurrency_1"]["conversations_per_min"], 3)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(res, indent=2))
    print("speedup at 16 vs 1:", res["speedup_conversations_per_min"])

if __name__ == "__main__": main()
