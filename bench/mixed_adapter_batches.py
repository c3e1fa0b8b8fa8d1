"""Rows of different LoRA adapters in one batch (PEFT `adapter_names`, the embedded backend's default), against one batch per adapter.

    python bench/mixed_adapter_batches.py --run-dir runs/smoke [--out bench/results/mixed_adapter_batches.json]

16 sampled requests (40 new tokens each) on the embedded SmolLM2-135M in fp32 with the trained speaker-GRPO, SFT and director-GRPO
adapters of a finished smoke run and the base, twice each: all 16 on one adapter; 4 per adapter in one mixed batch; 4 per adapter as four
batches (one adapter's requests at a time). The stage-level comparison is bench/mixed_adapter_evaluate.py."""

import argparse, asyncio, glob, json, os, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.llm.types import ChatRequest


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--run-dir", required=True, help="a finished smoke run (its 12_speaker_grpo, 13_sft, 22_director_grpo adapters)"
    )
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default="bench/results/mixed_adapter_batches.json")
    a = ap.parse_args()
    emb = EmbeddedBackend(dtype="float32")
    for k, stage in enumerate(["12_speaker_grpo", "13_sft", "22_director_grpo"]):
        found = glob.glob(f"{a.run_dir}/{stage}/out/*/adapter_config.json")
        if not found:
            raise SystemExit(f"--run-dir {a.run_dir}: no adapter under {stage}/out/")
        emb.load_adapter(f"a{k}", Path(found[0]).parent)
    questions = [f"Tell me something about topic number {i}, and how it makes you feel." for i in range(16)]
    models = [None, "a0", "a1", "a2"]

    async def run(assign, one_batch_per_adapter=False):
        reqs = [
            ChatRequest([{"role": "user", "content": q}], max_tokens=40, temperature=1.0, seed=i, model=m)
            for i, (q, m) in enumerate(zip(questions, assign))
        ]
        emb.batches.clear()
        t = time.perf_counter()
        if one_batch_per_adapter:
            for m in dict.fromkeys(assign):
                await asyncio.gather(*[emb.chat(r) for r in reqs if r.model == m])
        else:
            await asyncio.gather(*[emb.chat(r) for r in reqs])
        return round(time.perf_counter() - t, 2), list(emb.batches)

    async def all_():
        await run([None] * 16)  # warm-up
        cases = {
            "one_adapter_16_rows": ([None] * 16, False),
            "four_adapters_one_mixed_batch": ([models[i % 4] for i in range(16)], False),
            "four_adapters_four_batches": ([models[i % 4] for i in range(16)], True),
        }
        out = {}
        for name, (assign, split) in cases.items():
            runs = [await run(assign, split) for _ in range(a.reps)]
            out[name] = {"seconds": [s for s, _ in runs], "batches": runs[0][1]}
            print(name, out[name], flush=True)
        return out

    res = {
        "run_dir": a.run_dir,
        "dtype": "float32",
        "isa": {k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")},
    }
    res["cases"] = asyncio.run(all_())
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
