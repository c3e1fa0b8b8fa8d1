"""Same config, same seed, same run: two run folders of one config compared with `mascot diff-runs`, and what the embedded scheduler's
canonical (content) queue order costs in a whole run.

    # the three runs, on one machine, from one clone (each with its own judge cache):
    MASCOT_JUDGE_CACHE=jc-a.sqlite mascot run configs/smoke.yaml --run-name smoke-a &
    MASCOT_JUDGE_CACHE=jc-p.sqlite MASCOT_EMBEDDED_CANONICAL_ORDER=0 mascot run configs/smoke.yaml --run-name smoke-p &
    wait
    MASCOT_JUDGE_CACHE=jc-b.sqlite mascot run configs/smoke.yaml --run-name smoke-b
    python bench/reproducible_runs.py --same runs/smoke-a runs/smoke-b --arrival-order runs/smoke-p [--output FILE]

`--same A B`: two runs with the same settings; every artefact should be identical. `--arrival-order P`: a run of the same config with
the queue in arrival order (`MASCOT_EMBEDDED_CANONICAL_ORDER=0`), run at the same time as A so both see the same load: its stage
seconds against A's are the cost of the canonical order, and its diff against A shows what arrival order changes.

Writes bench/results/reproducible_runs.json (default) with the machine, the runs' commit and the date. Exit 1 when the two `--same`
runs differ.
"""

import argparse, json, os, platform, sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), platform.processor()
    )
    return {"cpu": cpu, "cores": os.cpu_count()}


def stage_seconds(run: Path) -> dict:
    "Each stage's seconds from its meta.json, the run's commit, and its wall time (first stage start to last stage end)."
    metas = [json.loads(p.read_text()) for p in sorted(run.glob("*/meta.json"))]
    if not metas:
        sys.exit(f"{run}: no stage meta.json (is it a run folder of mascot run?)")
    t = lambda s: datetime.fromisoformat(s)
    return {
        "commit": sorted({m.get("git_commit", "")[:7] for m in metas}),
        "stages": {m["stage"]: m["seconds"] for m in metas},
        "stage_seconds_sum": round(sum(m["seconds"] for m in metas), 1),
        "wall_seconds": round((max(t(m["end"]) for m in metas) - min(t(m["start"]) for m in metas)).total_seconds(), 1),
    }


def summary(report: list[dict]) -> dict:
    "Artefact counts of a diff-runs report, per stage and in all, with each differing artefact's first difference."
    per = {
        e["stage"]: {
            "compared": len(e["identical"]) + len(e["differing"]) + len(e["only_a"]) + len(e["only_b"]),
            "differing": {
                **e["differing"],
                **{n: "only in run A" for n in e["only_a"]},
                **{n: "only in run B" for n in e["only_b"]},
            },
        }
        for e in report
    }
    return {
        "compared": sum(v["compared"] for v in per.values()),
        "differing": sum(len(v["differing"]) for v in per.values()),
        "stages": per,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--same", nargs=2, metavar=("RUN_A", "RUN_B"), required=True, help="two runs of one config and seed"
    )
    ap.add_argument(
        "--arrival-order",
        metavar="RUN_P",
        default=None,
        help="a run of the same config with MASCOT_EMBEDDED_CANONICAL_ORDER=0, run beside RUN_A",
    )
    ap.add_argument("--output", default=str(ROOT / "bench/results/reproducible_runs.json"), help="the JSON written")
    a = ap.parse_args(argv)
    from mascot.pipeline.diff_runs import diff_runs

    run_a, run_b = map(Path, a.same)
    res = {
        "question": "do two runs of one config and seed give identical artefacts, and what does the canonical queue order cost?",
        "provenance": {
            "machine": machine(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
        "runs": {"a": str(run_a.name), "b": str(run_b.name)},
        "same_settings": summary(diff_runs(run_a, run_b)),
        "seconds": {"a": stage_seconds(run_a), "b": stage_seconds(run_b)},
    }
    if a.arrival_order:
        run_p = Path(a.arrival_order)
        res["runs"]["arrival_order"] = run_p.name
        res["seconds"]["arrival_order"] = stage_seconds(run_p)
        res["arrival_vs_canonical"] = summary(diff_runs(run_a, run_p))
        sa, sp = res["seconds"]["a"]["wall_seconds"], res["seconds"]["arrival_order"]["wall_seconds"]
        res["canonical_cost"] = {
            "canonical_wall_s": sa,
            "arrival_wall_s": sp,
            "ratio_canonical_over_arrival": round(sa / sp, 3),
            "note": "runs a and arrival_order ran at the same time on the same machine",
        }
    res["provenance"]["commit"] = res["seconds"]["a"]["commit"]
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    s = res["same_settings"]
    print(f"{run_a.name} vs {run_b.name}: {s['differing']} of {s['compared']} artefacts differ; written {out}")
    if "canonical_cost" in res:
        c = res["canonical_cost"]
        print(
            f"wall {c['canonical_wall_s']} s canonical vs {c['arrival_wall_s']} s arrival order (ratio {c['ratio_canonical_over_arrival']})"
        )
    return 1 if s["differing"] else 0


if __name__ == "__main__":
    sys.exit(main())
