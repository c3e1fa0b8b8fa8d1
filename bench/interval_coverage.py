"""Coverage of `mascot compare`'s 95% intervals on simulated scores (`mascot.evaluation.intervals.simulated`): the share of repetitions
whose interval holds the truth, the share whose interval is finite and inside the scale, and, for paired differences, the
false-positive rate under the null of no difference — on continuous data (normal, skewed) and on the discrete, tied data LLM judges
and arenas produce (integer 1–10 rubric scores with 10%, 30% or 50% of contexts untied, Likert 1–5, wins, a constant shift), at
n = 5 … 100 contexts; the default interval (studentized bootstrap widened to Student's t) on every kind, the percentile bootstrap and
Student's t alone on the continuous kinds.

    python bench/interval_coverage.py [--reps 1000] [--resamples 999]

Writes bench/results/interval_coverage.json and prints the Markdown table the intervals notebook shows.
"""

import argparse, datetime, json, platform, subprocess, time
from pathlib import Path
from mascot.evaluation.intervals import interval_check

SIZES = (5, 10, 20, 30, 100)
NULL_SIZES = (5, 30)
CASES = (  # (label, data kind, parameters, methods)
    ("normal", "normal", {}, ("percentile", "t", "studentized")),
    ("skewed", "skewed", {}, ("percentile", "t", "studentized")),
    ("judge 1–10, 10% untied", "judge", {"untied": 0.1}, ("studentized",)),
    ("judge 1–10, 30% untied", "judge", {"untied": 0.3}, ("studentized",)),
    ("judge 1–10, 50% untied", "judge", {"untied": 0.5}, ("studentized",)),
    ("Likert 1–5, 40% untied", "likert", {"untied": 0.4}, ("studentized",)),
    ("wins 0/1", "binary", {}, ("studentized",)),
    ("constant shift, float noise", "shift", {}, ("studentized",)),
    ("constant shift, exact", "shift", {"noise": 0.0}, ("studentized",)),
)


def git(*a: str) -> str:
    return subprocess.run(["git", *a], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1000, help="simulated samples per cell")
    ap.add_argument("--resamples", type=int, default=999, help="bootstrap resamples per interval")
    a = ap.parse_args()
    t0, rows = time.perf_counter(), []
    for label, data, kw, methods in CASES:
        for delta in (False, True):
            if not delta and ((data == "judge" and kw["untied"] != 0.3) or kw.get("noise", 1) == 0):
                continue  # the mean of one system's scores does not depend on the share of ties between two
            for method in methods:
                checks = {n: interval_check(method, n, data, delta, a.reps, a.resamples, seed=1, **kw) for n in SIZES}
                row = {
                    "data": label if delta else label.split(",")[0],
                    "statistic": "paired Δ" if delta else "mean",
                    "method": method,
                    "coverage": {n: c["coverage"] for n, c in checks.items()},
                    "finite_inside": {n: c["finite"] for n, c in checks.items()},
                }
                if delta:
                    null = {
                        n: interval_check(method, n, data, True, a.reps, a.resamples, 2, effect=False, **kw)
                        for n in NULL_SIZES
                    }
                    row["false_positive"] = {n: 1 - c["coverage"] for n, c in null.items()}
                rows.append(row)
                print(rows[-1], flush=True)
    out = {
        "what": "empirical coverage of nominal 95% intervals, finite share and null false-positive rate (mascot.evaluation.intervals.interval_check)",
        "reps": a.reps,
        "resamples": a.resamples,
        "sizes": SIZES,
        "null_sizes": NULL_SIZES,
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
    "Coverage per size, then the false-positive rate under the null (paired Δ) and the share of finite intervals inside the scale."
    sizes, nulls = out["sizes"], out["null_sizes"]
    head = "| data | statistic | interval | " + " | ".join(f"n={n}" for n in sizes)
    head += " | " + " | ".join(f"false + n={n}" for n in nulls) + " | finite, in scale |"
    lines = [head, "|" + "---|" * (4 + len(sizes) + len(nulls))]
    for r in out["rows"]:
        key = lambda d, n: d.get(n, d.get(str(n)))  # noqa: E731 (JSON keys are strings)
        cells = " | ".join(f"{100 * key(r['coverage'], n):.1f}%" for n in sizes)
        fp = " | ".join(f"{100 * key(r['false_positive'], n):.1f}%" if "false_positive" in r else "" for n in nulls)
        fin = min(key(r["finite_inside"], n) for n in sizes)
        lines.append(f"| {r['data']} | {r['statistic']} | {r['method']} | {cells} | {fp} | {100 * fin:.0f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
