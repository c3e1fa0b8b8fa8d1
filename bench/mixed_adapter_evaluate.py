"""The evaluate stage with mixed-adapter batches against one batch per adapter, on one finished run, alternating.

    python bench/mixed_adapter_evaluate.py --config configs/smoke.yaml --runs-dir runs [--reps 2] [--avx2]
        [--out bench/results/mixed_adapter_evaluate.json]

Runs `mascot run CONFIG --only evaluate` 2 x REPS times, MASCOT_EMBEDDED_MIXED_ADAPTERS=0 (each adapter's requests a batch of their own)
then =1 (the default: rows on the base and on every adapter share a batch, through PEFT's `adapter_names`), and keeps each run's
`meta.json` figures: wall seconds, the embedded model's prefill and decode seconds, `generate` calls, rows, tokens. The evaluate stage
runs eight systems on four sets of weights (base; trained director, speaker, SFT adapters), so split by adapter its batches held about
5 rows. The run's evaluate outputs are rewritten each time (the same stage, re-run); sampled texts differ between the two settings
because a sampled batch's seed follows the requests batched together.
"""

import argparse, json, os, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pipeline_profile import AVX2_ENV


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--config", default="configs/smoke.yaml", help="the config of a run whose stages up to evaluate have finished"
    )
    ap.add_argument("--runs-dir", default="runs", help="where that run's folder is (mascot run --runs-dir)")
    ap.add_argument("--reps", type=int, default=2, help="pairs of runs (split, then mixed)")
    ap.add_argument(
        "--avx2",
        action="store_true",
        help="torch, oneDNN and MKL kept to AVX2 kernels, fp32 serving (as on a CPU without bf16)",
    )
    ap.add_argument("--out", default="bench/results/mixed_adapter_evaluate.json")
    a = ap.parse_args()
    import yaml

    run_name = yaml.safe_load(Path(a.config).read_text())["run_name"]
    meta_path = Path(a.runs_dir, run_name, "30_generate", "meta.json")
    env = {**os.environ, "MASCOT_EMBEDDED_DTYPE": "float32", **(AVX2_ENV if a.avx2 else {})}
    mascot = str(Path(sys.executable).parent / "mascot")
    runs = []
    for rep in range(a.reps):
        for mixed in (0, 1):
            cmd = [mascot, "run", a.config, "--runs-dir", a.runs_dir, "--only", "evaluate"]
            subprocess.run(cmd, env={**env, "MASCOT_EMBEDDED_MIXED_ADAPTERS": str(mixed)}, check=True)
            m = json.loads(meta_path.read_text())
            e = m["embedded"]
            keep = ("prefill_s", "decode_s", "generate_calls", "rows", "prefill_tokens", "new_tokens")
            runs.append({"rep": rep, "mixed": bool(mixed), "seconds": m["seconds"], **{k: e[k] for k in keep}})
            print(runs[-1], flush=True)
    mean = lambda xs: round(sum(xs) / len(xs), 1)  # noqa: E731
    summary = {
        ("mixed" if mixed else "split"): {
            k: mean([r[k] for r in runs if r["mixed"] == mixed]) for k in ("seconds", "prefill_s", "decode_s")
        }
        for mixed in (False, True)
    }
    res = {
        "config": a.config,
        "dtype": "float32",
        "isa": {k: env.get(k) for k in AVX2_ENV},
        "cpu": os.cpu_count(),
        "load_avg_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d"),
        "runs": runs,
        "mean": summary,
        "mixed_over_split": round(summary["mixed"]["seconds"] / summary["split"]["seconds"], 3),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"wrote {a.out}: mixed/split wall {res['mixed_over_split']}")


if __name__ == "__main__":
    main()
