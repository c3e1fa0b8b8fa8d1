"""The judge stage's own throughput against raw batched `model.generate` on the same prompts (issue #17's ratio), and the stage
with and without shared-prefix reuse, alternated in one process on one embedded model.

The stage path is the real one (`judge_folder_async` over a finished run's evaluation folder); the raw path builds the same judge
prompts with `record_items`, batches them 16 at a time in arrival order with plain left padding, and decodes greedily to the same cap.

    python bench/judge_throughput.py --eval-dir RUN/30_generate/out/mascot_eval/ED/test [--fp32] [--reps 1]

Writes bench/results/judge_throughput[-fp32].json. One run on a shared machine: read the ratios, not the absolute times.
"""

import argparse, asyncio, json, os, statistics, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
from unittest.mock import patch
import torch
import mascot.llm.embedded_backend as llm
from mascot.llm.embedded_backend import EMBEDDED_STAT_KEYS, EmbeddedBackend, embedded_stats
from mascot.judging.panel import record_items, record_domain
from mascot.evaluation.judge_all import JudgeStageConfig, judge_folder_async
from mascot.core.store import read_jsonl


def judge_prompts(eval_dir: Path, examples: int) -> list[list[dict]]:
    "Every judge call the stage makes on `eval_dir`: persona items then collective ones, file by file."
    msgs = []
    for f in sorted(eval_dir.glob("*.jsonl")):
        for kind in ("persona", "collective"):
            for rec in read_jsonl(f):
                msgs += [it.messages for it in record_items(rec, kind, record_domain(rec, f), examples)]
    return msgs


def raw_generate(emb: EmbeddedBackend, prompts: list[list[dict]], max_new: int, batch: int = 16) -> dict:
    tok, model = emb.tokenizer, emb.model
    total, t = 0, time.perf_counter()
    for start in range(0, len(prompts), batch):
        texts = [
            tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
            for m in prompts[start : start + batch]
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id)
        for row in out[:, enc["input_ids"].shape[1] :].tolist():  # count up to the first end token, as the backend does
            total += next((i for i, x in enumerate(row) if x == tok.eos_token_id), len(row))
    dt = time.perf_counter() - t
    return {"seconds": round(dt, 2), "new_tokens": total, "tokens_per_s": round(total / dt, 2)}


def stage(emb: EmbeddedBackend, eval_dir: Path, a, reuse: bool) -> dict:
    before = embedded_stats()
    no_groups = lambda rows, min_tokens=0: [([i], 0) for i in range(len(rows))]
    with (
        tempfile.TemporaryDirectory() as out,
        patch.object(llm, "prefix_groups", llm.prefix_groups if reuse else no_groups),
    ):
        cfg = JudgeStageConfig(
            input_dir=str(eval_dir),
            output_dir=out,
            judge_examples=a.judge_examples,
            judge_max_tokens=a.max_tokens,
            progress=False,
            cache=False,  # every call timed, none answered from the judge cache
        )
        t = time.perf_counter()
        asyncio.run(judge_folder_async(cfg, embedded=emb))
        dt = time.perf_counter() - t
    d = {k: round(v - before[k], 2) for k, v in embedded_stats().items()}
    return {
        "seconds": round(dt, 2),
        "tokens_per_s": round(d["new_tokens"] / dt, 2),
        **{k: d[k] for k in EMBEDDED_STAT_KEYS if k != "load_s"},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval-dir", required=True)
    ap.add_argument("--judge-examples", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument(
        "--skip-no-reuse",
        action="store_true",
        help="skip the stage with prefix reuse off (when its time is known from elsewhere)",
    )
    ap.add_argument("--fp32", action="store_true", help="fp32 serving (what a CPU without bf16 units gets)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eval_dir = Path(a.eval_dir)
    emb = EmbeddedBackend(dtype="float32" if a.fp32 else "auto").load()
    prompts = judge_prompts(eval_dir, a.judge_examples)
    res = {
        "eval_dir": str(eval_dir),
        "judge_calls": len(prompts),
        "dtype": emb.dtype,
        "max_tokens": a.max_tokens,
        "load_before": os.getloadavg(),
        "raw_generate": [],
        "stage_no_prefix_reuse": [],
        "stage": [],
    }
    for _ in range(a.reps):
        res["raw_generate"].append(raw_generate(emb, prompts, a.max_tokens))
        print("raw", res["raw_generate"][-1], flush=True)
        if not a.skip_no_reuse:
            res["stage_no_prefix_reuse"].append(stage(emb, eval_dir, a, False))
            print("stage, no reuse", res["stage_no_prefix_reuse"][-1], flush=True)
        res["stage"].append(stage(emb, eval_dir, a, True))
        print("stage", res["stage"][-1], flush=True)
    rate = lambda k: statistics.fmean(x["tokens_per_s"] for x in res[k])
    res["ratio_stage_vs_raw"] = round(rate("stage") / rate("raw_generate"), 3)
    if res["stage_no_prefix_reuse"]:
        res["ratio_stage_no_reuse_vs_raw"] = round(rate("stage_no_prefix_reuse") / rate("raw_generate"), 3)
        res["speedup_prefix_reuse_seconds"] = round(
            statistics.fmean(x["seconds"] for x in res["stage_no_prefix_reuse"])
            / statistics.fmean(x["seconds"] for x in res["stage"]),
            3,
        )
    res["load_after"] = os.getloadavg()
    out = Path(a.out or f"bench/results/judge_throughput{'-fp32' if a.fp32 else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print({k: v for k, v in res.items() if k.startswith(("ratio", "speedup"))})


if __name__ == "__main__":
    main()
