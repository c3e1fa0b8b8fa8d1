"""The project speaks of itself only: no tracked file numbers past work periods (a numbered session or stop) and no file
name carries one ("-s38"). History belongs in git; current figures belong in bench/ (bench/README.md)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()

# a numbered work period in text: a session or a stop followed by its number (examples in test_matcher)
WORK_PERIOD = re.compile(r"(?i)\b(?:sessions? \d+|stop \d+)")
# a numbered work period in a file name: results-s25.json, profile-s30-after.png
NAME_SUFFIX = re.compile(r"-s\d{2}\b")
BINARY_SUFFIXES = set(".png .jpg .jpeg .gif .ico .pdf .gguf .safetensors .bin .pt .parquet .zip .gz".split())


def work_periods(text: str) -> list[str]:
    "The numbered work periods in `text`."
    return [m.group(0) for m in WORK_PERIOD.finditer(text)]


def test_matcher():
    # the words spelt apart from their numbers, so that this file does not itself number a work period
    session, sessions, stop = "session", "Sessions", "stop"
    assert work_periods(f"measured in {session} 38 on the EPYC") == [f"{session} 38"]
    assert work_periods(f"{sessions} 36–40, a Zen 4 AMD EPYC") == [f"{sessions} 36"]
    assert work_periods(f"the last landed CI run ({stop} 23)") == [f"{stop} 23"]
    assert not work_periods("the sessions of the study and a chat session")
    assert not work_periods("a session-scoped fixture; stop the server at 5 s")
    assert NAME_SUFFIX.search("bench/results/episodes_throughput-fp32-s25.json")
    assert NAME_SUFFIX.search("pipeline_profile-smoke-avx2-s30-after.png")
    assert not NAME_SUFFIX.search("bench/results/pipeline_profile-smoke-avx2-epyc.json")
    assert not NAME_SUFFIX.search("configs/smoke.yaml")


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no tracked files to check")
    return [p for p in out.decode().split("\0") if p]


def text_of(path: Path) -> str | None:
    "The file's text, or None for a binary, missing or non-UTF-8 file."
    if path.suffix.lower() in BINARY_SUFFIXES or not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_no_numbered_work_periods():
    bad_names, bad_text = [], []
    for rel in tracked_files():
        path = ROOT / rel
        if path.resolve() == THIS or rel.startswith(".git/"):
            continue
        if NAME_SUFFIX.search(Path(rel).name):
            bad_names.append(rel)
        text = text_of(path)
        if text is None:
            continue
        hits = [
            f"{rel}:{n}: {', '.join(sorted(set(found)))}"
            for n, line in enumerate(text.splitlines(), 1)
            if (found := work_periods(line))
        ]
        bad_text.extend(hits)
    problems = [f"file name with a work-period suffix: {p}" for p in bad_names] + bad_text
    if problems:
        print("\n".join(problems))
    assert not problems, (
        f"{len(problems)} numbered work period(s) in tracked files "
        "(say what a figure is, not when it was made; history belongs in git):\n"
        + "\n".join(problems[:40])
        + (f"\n... and {len(problems) - 40} more" if len(problems) > 40 else "")
    )
