"""Run every notebook's examples as `nbdev_test` does (the same cells skipped by the same flags, notebooks in parallel, a non-zero exit
naming those that failed) and keep each executed copy, outputs included, under `--save-executed`: `make test` keeps them in
`_docs/executed/`, and `mascot site` shows those outputs on the documentation pages of notebooks that have not changed since.

    python scripts/test_notebooks.py --n-workers 2 --flags real_model --save-executed _docs/executed [--path nbs/core]
"""

import argparse, sys
from pathlib import Path

from fastcore.parallel import parallel
from fastcore.xtras import working_directory
from nbdev.config import get_config
from nbdev.doclinks import nbglob
from nbdev.test import _keep_file

from mascot.testing import run_notebook


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--path", default=None, help="a notebook or folder (default: every notebook under nbs/)")
    ap.add_argument(
        "--flags",
        default="",
        help="space-separated flags of cells to run that are skipped by default (settings.ini tst_flags)",
    )
    ap.add_argument(
        "--tiny-model-except",
        default=None,
        help="space-separated flags: the tiny random model (MASCOT_TINY_MODEL=1) in every cell but those carrying one of them, "
        "which get the embedded model (default: the model the environment names, everywhere)",
    )
    ap.add_argument("--n-workers", type=int, default=2, help="notebooks run at once")
    ap.add_argument(
        "--save-executed", default=None, help="folder for the executed copies, mirroring nbs/ (none kept when omitted)"
    )
    a = ap.parse_args(argv)
    cfg = get_config()
    nbs = Path(cfg.nbs_path).absolute()
    skip = set(cfg.tst_flags.split()) - set(a.flags.split())
    files = [f.absolute() for f in sorted(nbglob(a.path, as_path=True)) if _keep_file(f, ".notest")]
    if not files:
        print(f"test_notebooks: no notebooks under {a.path or nbs}", file=sys.stderr)
        return 2
    save_to = Path(a.save_executed).absolute() if a.save_executed else None
    sys.path.insert(0, str(cfg.config_path))
    with working_directory(nbs):
        results = parallel(
            run_notebook,
            files,
            skip_flags=skip,
            save_to=save_to,
            root=nbs,
            real_model_flags=set(a.tiny_model_except.split()) if a.tiny_model_except is not None else None,
            n_workers=a.n_workers if len(files) > 1 else 0,
            pause=0.01,
        )
    failed = [str(f.relative_to(nbs)) for f, (ok, _) in zip(files, results) if not ok]
    # where the time goes, as pytest's --durations says it
    slowest = sorted(zip(files, results), key=lambda x: -x[1][1])[:12]
    print("slowest notebooks: " + ", ".join(f"{f.relative_to(nbs)} {s:.0f} s" for f, (_, s) in slowest), flush=True)
    if failed:
        sys.stderr.write("test_notebooks: notebooks failed:\n\t" + "\n\t".join(failed) + "\n")
        return 1
    print(f"Success: {len(files)} notebooks" + (f"; executed copies in {save_to}" if save_to else "") + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
