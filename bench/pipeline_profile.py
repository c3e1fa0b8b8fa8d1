"""Where the main job's time goes, stage by stage: kernel start, imports, model load, prompt processing (prefill), decoding,
training steps, and the rest (scoring, judging, I/O, Python).

    python bench/pipeline_profile.py --run-dir runs/smoke                      # profile a finished run
    python bench/pipeline_profile.py --config configs/smoke.yaml --fp32        # run the job first (fp32 serving, as on CPUs without bf16)
    python bench/pipeline_profile.py --config configs/smoke.yaml --avx2        # ... on an AVX-512 CPU, as an AVX2-only one without bf16 runs

Reads each stage's `meta.json` (wall seconds, peak memory, the embedded backend's load/prefill/decode seconds, which `mascot run`
records), its executed notebook (papermill's per-cell timings) and the training logs beside its adapters (`log_history.json`,
TRL's `train_runtime`). Writes `bench/results/pipeline_profile[-NAME].json` and a stacked bar chart beside it.
"""

import argparse, json, os, re, subprocess, sys, tempfile, time
from datetime import datetime
from pathlib import Path

from mascot.llm.embedded_backend import EMBEDDED_STAT_KEYS

# the ISA caps torch (ATen), oneDNN and MKL honour: the same code paths as on a CPU without AVX-512 (and so without bf16 units)
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
IMPORT_LINE = re.compile(r"^\s*(#.*|import .*|from \S+ import .*|)$")


def _seconds(start: str | None, end: str | None) -> float:
    if not start or not end:
        return 0.0
    return (
        datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
    ).total_seconds()


def cell_times(executed: Path) -> dict:
    "Kernel start (papermill start to the first cell), import cells, and all cells, from papermill's own timings."
    nb = json.loads(executed.read_text())
    cells = [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code" and c.get("metadata", {}).get("papermill", {}).get("start_time")
    ]
    if not cells:
        return {"kernel_start_s": 0.0, "imports_s": 0.0, "cells_s": 0.0}
    pm = nb["metadata"].get("papermill", {})
    src = lambda c: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    imports = sum(
        c["metadata"]["papermill"].get("duration") or 0
        for c in cells
        if all(IMPORT_LINE.match(l) for l in src(c).splitlines()) and src(c).strip()
    )
    return {
        "kernel_start_s": max(0.0, _seconds(pm.get("start_time"), cells[0]["metadata"]["papermill"]["start_time"])),
        "imports_s": imports,
        "cells_s": sum(c["metadata"]["papermill"].get("duration") or 0 for c in cells),
    }


def training_seconds(stage_dir: Path) -> float:
    "TRL's own `train_runtime`, from every training log the stage left."
    total = 0.0
    for log in stage_dir.rglob("log_history.json"):
        total += sum(r.get("train_runtime", 0.0) for r in json.loads(log.read_text()))
    return total


def profile_run(run_dir: Path) -> dict:
    stages = {}
    for meta_path in sorted(run_dir.glob("*/meta.json")):
        sdir, meta = meta_path.parent, json.loads(meta_path.read_text())
        if not meta.get("seconds"):
            continue
        t = (
            cell_times(sdir / "executed.ipynb")
            if (sdir / "executed.ipynb").exists()
            else {"kernel_start_s": 0, "imports_s": 0, "cells_s": 0}
        )
        emb = meta.get("embedded") or {}
        row = {
            "wall_s": meta["seconds"],
            "peak_rss_mb": meta.get("peak_rss_mb"),
            "kernel_start_s": round(t["kernel_start_s"], 1),
            "imports_s": round(meta.get("import_s", t["imports_s"]), 1),
            "model_load_s": emb.get("load_s", 0.0),
            "prefill_s": emb.get("prefill_s", 0.0),
            "decode_s": emb.get("decode_s", 0.0),
            "training_s": round(training_seconds(sdir), 1),
        }
        accounted = row["imports_s"] + row["model_load_s"] + row["prefill_s"] + row["decode_s"] + row["training_s"]
        row["other_in_cells_s"] = round(max(0.0, t["cells_s"] - accounted), 1)  # scoring, judging glue, I/O, Python
        row["outside_cells_s"] = round(
            max(0.0, meta["seconds"] - t["cells_s"] - row["kernel_start_s"]), 1
        )  # papermill, kernel shutdown
        if emb:
            row.update(
                {
                    k: emb.get(k, 0)
                    for k in EMBEDDED_STAT_KEYS
                    if not k.endswith("_s")  # the counts; its seconds are read above
                }
            )
            row["mean_batch_rows"] = round(emb["rows"] / max(1, emb["generate_calls"]), 2)
            row["decode_tok_per_s"] = round(emb["new_tokens"] / emb["decode_s"], 1) if emb["decode_s"] else None
            row["prefill_tok_per_s"] = round(emb["prefill_tokens"] / emb["prefill_s"], 1) if emb["prefill_s"] else None
        stages[meta["stage"]] = row
    keys = (
        "wall_s",
        "kernel_start_s",
        "imports_s",
        "model_load_s",
        "prefill_s",
        "decode_s",
        "training_s",
        "other_in_cells_s",
        "outside_cells_s",
    )
    total = {k: round(sum(s[k] for s in stages.values()), 1) for k in keys}
    return {"run_dir": str(run_dir), "stages": stages, "total": total}


def plot(prof: dict, out: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [
        "kernel_start_s",
        "imports_s",
        "model_load_s",
        "prefill_s",
        "decode_s",
        "training_s",
        "other_in_cells_s",
        "outside_cells_s",
    ]
    names = list(prof["stages"])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    left = [0.0] * len(names)
    for p in parts:
        vals = [prof["stages"][n][p] for n in names]
        ax.barh(names, vals, left=left, label=p.removesuffix("_s").replace("_", " "))
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"main job profile: {prof['total']['wall_s']:.0f} s in stages ({prof.get('dtype', '')})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def provenance(run_dir: Path) -> dict:
    "The machine this runs on (the run's, when it is profiled where it ran), and the commit and end of the run, from its stages' meta.json."
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "not recorded")
    flags = next((l for l in info.splitlines() if l.startswith("flags")), "")
    metas = [json.loads(m.read_text()) for m in sorted(Path(run_dir).glob("*/meta.json"))]
    return {
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "avx512f": " avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags,
        },
        "commit": next((m["git_commit"][:7] for m in metas if m.get("git_commit")), None),
        "date": max((m["end"] for m in metas if m.get("end")), default=None),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", help="a finished run folder (runs/<run>)")
    ap.add_argument("--config", help="run this pipeline config first, into a temporary runs folder")
    ap.add_argument(
        "--fp32",
        action="store_true",
        help="serve the embedded model in fp32 (MASCOT_EMBEDDED_DTYPE=float32), as on CPUs without bf16",
    )
    ap.add_argument(
        "--avx2",
        action="store_true",
        help="also keep torch, oneDNN and MKL to AVX2 kernels (implies --fp32): an AVX-512 machine then runs as an AVX2-only CPU would",
    )
    ap.add_argument("--name", default="", help="suffix of the results file: pipeline_profile-NAME.json")
    ap.add_argument("--out-dir", default="bench/results")
    a = ap.parse_args()
    if not (a.run_dir or a.config):
        ap.error("give --run-dir or --config")
    env = {
        **os.environ,
        **({"MASCOT_EMBEDDED_DTYPE": "float32"} if a.fp32 or a.avx2 else {}),
        **(AVX2_ENV if a.avx2 else {}),
    }
    wall = None
    load_before = os.getloadavg()  # the machine may be shared: the 1, 5 and 15 minute load averages around the run
    if a.config:
        runs = Path(tempfile.mkdtemp(prefix="profile-runs-"))
        t0 = time.time()
        subprocess.run(
            [sys.executable, "-m", "mascot.pipeline.run", a.config, "--runs-dir", str(runs)], check=True, env=env
        )
        wall = round(time.time() - t0, 1)
        run_dir = next(p for p in runs.iterdir() if p.is_dir())
    else:
        run_dir = Path(a.run_dir)
    prof = {"provenance": provenance(run_dir), **profile_run(run_dir)}
    prof["pipeline_wall_s"] = wall
    prof["dtype"] = env.get("MASCOT_EMBEDDED_DTYPE", "auto")
    prof["isa"] = {k: env[k] for k in AVX2_ENV if k in env} or "native"
    prof["cpus"] = os.cpu_count()
    prof["load_avg_before"], prof["load_avg_after"] = (
        [round(x, 2) for x in load_before],
        [round(x, 2) for x in os.getloadavg()],
    )
    out = Path(a.out_dir) / f"pipeline_profile{'-' + a.name if a.name else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(prof, indent=2))
    plot(prof, out.with_suffix(".png"))
    print(json.dumps(prof["total"], indent=2))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
