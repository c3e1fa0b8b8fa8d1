"""Coverage of `mascot compare`'s 95% intervals on simulated scores: the share of repetitions whose interval holds the truth, for a mean
and for a paired difference (true difference 0), on normal and skewed (exponential) data, at n = 2 … 100 contexts, for the percentile
bootstrap, Student's t and the default (studentized bootstrap widened to Student's t).

    python bench/interval_coverage.py [--reps 1500] [--resamples 999]

Writes bench/results/interval_coverage.json and prints the Markdown table the compare notebook shows.
"""

import argparse, datetime, json, platform, subprocess, time
from pathlib import Path
from mascot.evaluation.intervals import coverage

SIZES = (2, 5, 10, 20, 30, 100)
METHODS = ("percentile", "t", "studentized")


def git(*a: str) -> str:
    return subprocess.run(["git", *a], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1500, help="simulated samples per cell")
    ap.add_argument("--resamples", type=int, default=999, help="bootstrap resamples per interval")
    a = ap.parse_args()
    t0, rows = time.perf_counter(), []
    for data in ("normal", "skewed"):
        for delta in (False, True):
            for method in METHODS:
                cov = {n: coverage(method, n, data, delta, a.reps, a.resamples, seed=1) for n in SIZES}
                rows.append(
                    {"data": data, "statistic": "paired Δ" if delta else "mean", "method": method, "coverage": cov}
                )
                print(rows[-1], flush=True)
    out = {
        "what": "empirical coverage of nominal 95% intervals (mascot.evaluation.intervals.coverage)",
        "reps": a.reps,
        "resamples": a.resamples,
        "sizes": SIZES,
        "rows": rows,
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": platform.platform(),
        "commit": git("rev-parse", "--short", "HEAD"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    path = Path(__file__).parent / "results" / "interval_coverage.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(out))


def markdown(out: dict) -> str:
    head = "| data | statistic | interval | " + " | ".join(f"n={n}" for n in out["sizes"]) + " |"
    lines = [head, "|" + "---|" * (3 + len(out["sizes"]))]
    for r in out["rows"]:
        cells = " | ".join(f"{100 * r['coverage'][n]:.1f}%" for n in out["sizes"])
        lines.append(f"| {r['data']} | {r['statistic']} | {r['method']} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
