"""Notebook cell sizes: per notebook, its exported cells' lengths in lines, how many are over 60 and over 100 lines, and the share of
exported cells followed by a visible example (the next code cell, markdown between them allowed, is neither exported nor hidden).

    python scripts/cell_sizes.py [--nbs nbs] [--top 15] [--json FILE] [--check]

A cell holds one idea: an exported cell stays within 60 lines, a class included. A class too long for one cell has too many jobs:
split it by responsibility (a collaborator it holds, a base class owning one concern, functions that need no state), never into
methods attached one cell at a time with `@patch`. Each exported cell is followed by a sentence and an asserting example.

`--check` exits 1 unless no exported cell is over 60 lines and at least 80% of exported cells are followed by an example; it names
each cell over the limit."""

import argparse, json, statistics, sys
from pathlib import Path

LIMIT, LARGE, EXAMPLE_SHARE = 60, 100, 0.8


def directives(src: str) -> set[str]:
    "The cell's nbdev directives (`#| export`, `#| hide`, ...), by name."
    return {line[3:].strip().split()[0] for line in src.splitlines() if line.startswith("#|") and line[3:].strip()}


def code_lines(src: str) -> int:
    "Lines of a cell as the notebook shows them (its directive lines counted), without trailing blank lines."
    return len(src.rstrip().splitlines())


def notebook_cells(path: Path) -> list[dict]:
    "Each code cell: its id, lines, whether nbdev exports it, and whether an example follows it."
    cells = json.loads(path.read_text())["cells"]
    code = [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]
    out = []
    for k, (i, src) in enumerate(code):
        d = directives(src)
        exported = bool(d & {"export", "exports"})
        nxt = directives(code[k + 1][1]) if k + 1 < len(code) else None
        example = nxt is not None and not (nxt & {"export", "exports", "exporti", "hide", "eval:"})
        out.append(
            {
                "id": cells[i].get("id"),
                "lines": code_lines(src),
                "exported": exported,
                "example_after": example,
            }
        )
    return out


def report(nbs: Path) -> dict:
    "Per notebook and overall: exported cells, their median and largest size, counts over the limits, share followed by an example."
    rows, every, too_long = {}, [], []
    for path in sorted(p for p in nbs.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts):
        exp = [c for c in notebook_cells(path) if c["exported"]]
        if not exp:
            continue
        every += exp
        too_long += [(str(path.relative_to(nbs)), c) for c in exp if c["lines"] > LIMIT]
        sizes = [c["lines"] for c in exp]
        rows[str(path.relative_to(nbs))] = {
            "exported_cells": len(exp),
            "median_lines": statistics.median(sizes),
            "max_lines": max(sizes),
            f"over_{LIMIT}": sum(s > LIMIT for s in sizes),
            f"over_{LARGE}": sum(s > LARGE for s in sizes),
            "followed_by_example": round(sum(c["example_after"] for c in exp) / len(exp), 3),
        }
    sizes = [c["lines"] for c in every]
    total = {
        "notebooks": len(rows),
        "exported_cells": len(every),
        "median_lines": statistics.median(sizes) if sizes else 0,
        "under_30": round(sum(s < 30 for s in sizes) / max(len(sizes), 1), 3),
        f"over_{LIMIT}": sum(s > LIMIT for s in sizes),
        f"over_{LARGE}": sum(s > LARGE for s in sizes),
        "max_lines": max(sizes, default=0),
        "followed_by_example": round(sum(c["example_after"] for c in every) / max(len(every), 1), 3),
    }
    return {"notebooks": rows, "total": total, "too_long": too_long}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nbs", default=str(Path(__file__).resolve().parents[1] / "nbs"), help="the notebooks folder")
    p.add_argument("--top", type=int, default=15, help="how many notebooks to list, largest exported cell first")
    p.add_argument("--json", help="also write the whole report to this JSON file")
    p.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 on a cell over {LIMIT} lines or under {EXAMPLE_SHARE * 100:.0f}%% followed by an example",
    )
    a = p.parse_args(argv)
    r = report(Path(a.nbs))
    print(f"{'notebook':<44} {'cells':>5} {'median':>6} {'max':>4} {'>60':>4} {'>100':>4} {'example':>7}")
    for name, row in sorted(r["notebooks"].items(), key=lambda kv: -kv[1]["max_lines"])[: a.top]:
        print(
            f"{name:<44} {row['exported_cells']:>5} {row['median_lines']:>6} {row['max_lines']:>4} {row[f'over_{LIMIT}']:>4}"
            f" {row[f'over_{LARGE}']:>4} {row['followed_by_example']:>7.0%}"
        )
    t = r["total"]
    print(
        f"\n{t['notebooks']} notebooks, {t['exported_cells']} exported cells: median {t['median_lines']} lines, {t['under_30']:.0%} under 30,"
        f" {t[f'over_{LIMIT}']} over {LIMIT},"
        f" {t[f'over_{LARGE}']} over {LARGE}, largest {t['max_lines']};"
        f" {t['followed_by_example']:.0%} followed by an example"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))
    if a.check:
        for path, cell in r["too_long"]:
            print(f"over {LIMIT} lines: {path} cell {cell['id']} ({cell['lines']} lines)")
        return int(t[f"over_{LIMIT}"] > 0 or t["followed_by_example"] < EXAMPLE_SHARE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
