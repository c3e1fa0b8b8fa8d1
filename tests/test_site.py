"The main job end to end: `mascot run configs/smoke.yaml` on the embedded model, then the results site opened in headless Chromium."
import json, os, re, shutil, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

def test_smoke_run_has_every_stage_and_figure(smoke_run):
    from mascot.pipeline import STAGES
    for st in STAGES:
        sdir = smoke_run / st.dir
        assert (sdir / "executed.ipynb").exists(), st.key
        assert json.loads((sdir / "run_summary.json").read_text())["status"] == "completed", st.key
        meta = json.loads((sdir / "meta.json").read_text())
        assert meta["start"] and meta["end"] and meta["versions"]["torch"]
        assert meta["seconds"] > 0 and 100 < meta["peak_rss_mb"] < 64_000, (st.key, meta.get("peak_rss_mb"))  # the kernel's own peak memory
    figs = sorted((smoke_run / "figures").glob("*/*.png"))
    assert {p.parent.name for p in figs} >= {"f01_persona_table_ed", "f02_collective_table_ed", "f04_ablation", "f06_big_five_heatmap"}
    # the persona table's numbers are the judge table's means
    import pandas as pd
    scores = pd.read_csv(smoke_run / "31_llm_judge" / "out" / "judge_scores.csv")
    f01 = pd.read_csv(smoke_run / "figures" / "f01_persona_table_ed" / "f01_persona_table_ed.csv")
    row = f01.iloc[0]
    sel = scores[(scores.kind == "persona") & (scores.system == row.system) & (scores.criterion == row.criterion) & (scores.group == row.group)]
    assert abs(sel.score.mean() - row["mean"]) < 1e-6 and len(sel) == row["n"]

def test_smoke_run_trained_and_served_the_adapters(smoke_run):
    "The training stages moved their adapters' weights, and the evaluation served them by alias (the role trace proves which id each role called)."
    for stage in ("12_speaker_grpo", "13_sft", "22_director_grpo", "23_director_dpo"):
        path = Path(json.loads((smoke_run / stage / "outputs.json").read_text())["path"])
        meta = json.loads((path / "mascot_metadata.json").read_text())
        assert meta["max_weight_change"] > 0 and meta["steps"] >= 1, stage
        assert (path / "adapter_model.safetensors").exists(), stage
    for stage in ("11_reward_model", "21_group_reward_model"):
        meta = json.loads((Path(json.loads((smoke_run / stage / "outputs.json").read_text())["path"]) / "mascot_metadata.json").read_text())
        assert 0 <= meta["heldout_accuracy_after"] <= 1 and meta["heldout_contexts"], stage
    files = json.loads((smoke_run / "30_evaluate" / "outputs.json").read_text())["files"]
    assert set(files) == {"mascot", "mascot-g", "mascot-i", "mascot-c", "mascot-p", "zero-shot", "few-shot", "sft"}
    rec = json.loads(open(files["mascot"]).readline())
    assert rec["metadata"]["director_model"] == "mascot-director" and set(rec["metadata"]["adapters"]) == {"director", "speaker"}
    assert json.loads(open(files["sft"]).readline())["metadata"]["speaker_model"] == "mascot-sft"

def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe: pytest.fail("headless Chromium is needed for the site test: apt-get install chromium (make test does it)")
    return exe

def browse(url: str, tmp: Path, screenshot: Path | None = None) -> str:
    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000", "--window-size=1200,2000"]
    if screenshot: subprocess.run(flags + [f"--screenshot={screenshot}", url], capture_output=True, timeout=120)
    return subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout

def test_site_lists_run_and_shows_figures(smoke_run, tmp_path):
    from mascot.site import build_site
    idx = build_site([smoke_run], output_dir=tmp_path / "_site")
    dom = browse(idx.resolve().as_uri(), tmp_path)
    assert "smoke" in dom and "completed" in dom
    page = tmp_path / "_site" / "runs" / "smoke" / "index.html"
    ARTIFACTS.mkdir(exist_ok=True)
    dom = browse(page.resolve().as_uri(), tmp_path, screenshot=ARTIFACTS / "site_run_page.png")
    total = int(re.search(r'data-images-total="(\d+)"', dom).group(1)); loaded = int(re.search(r'data-images-loaded="(\d+)"', dom).group(1))
    assert total >= 4 and loaded == total, (loaded, total)
    assert (ARTIFACTS / "site_run_page.png").stat().st_size > 10_000
    nb_pages = list((tmp_path / "_site" / "runs" / "smoke" / "notebooks").glob("*.html"))
    assert len(nb_pages) >= 10
