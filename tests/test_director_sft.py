"""Director SFT on human supporters: rows from the shipped ESConv sample through the roster's strategy mapping, early stopping on
validation conversations (the tiny model), and the optional pipeline stage: skipped with one line for a roster without a mapping, its
adapter the start of director GRPO when it ran."""

import json
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_rows_from_the_shipped_esconv_sample_name_the_mapped_personas():
    from mascot.domain.dataset_formats import esconv_splits, read_esconv_json
    from mascot.domain.datasets import demo_data_dir
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.stage2.director_sft import strategy_rows

    rows = strategy_rows("demo:esconv", SUPPORT_ROSTER)
    recs = read_esconv_json(demo_data_dir() / "esconv" / "ESConv.json")
    for r in rows:  # each row's target is the persona its supporter turn's strategy maps to
        i, j = int(r["conversation"].split("_")[1]), int(r["id"].split("dialog[")[1].rstrip("]"))
        strategy = recs[i]["dialog"][j]["annotation"]["strategy"]
        d = json.loads(r["completion"][0]["content"])
        assert (d["agent_name"], d["action"]) == (SUPPORT_ROSTER.strategy_personas[strategy], strategy.lower())
        assert r["prompt"][0]["role"] == "system" and "Who speaks next?" in r["prompt"][1]["content"]
    names = Counter(json.loads(r["completion"][0]["content"])["agent_name"] for r in rows)
    assert set(names) == {"The Anchor", "The Catalyst", "The Beacon"}, names
    # only the training conversations of the package's ESConv split
    train = {f"esconv_{i}" for i, s in enumerate(esconv_splits(len(recs))) if s == "train"}
    assert {r["conversation"] for r in rows} <= train


def test_early_stopping_records_the_best_step(tmp_path, monkeypatch):
    monkeypatch.setenv("MASCOT_TINY_MODEL", "1")
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.stage2.director_sft import DirectorSFTConfig, strategy_rows, train_director_sft

    cfg = DirectorSFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        validation_fraction=0.25,
        eval_steps=1,
        early_stopping_patience=1,
        collapse_probe_states=2,
        max_length=768,
    )
    out = train_director_sft(cfg, strategy_rows("demo:esconv", SUPPORT_ROSTER)[:16], tmp_path / "sft")
    meta = json.loads((out / "mascot_metadata.json").read_text())
    es = meta["early_stopping"]
    curve = {p["step"]: p["eval_loss"] for p in es["validation_curve"]}
    assert es["best_step"] in curve and es["best_eval_loss"] == min(curve.values()), es
    assert meta["num_validation_rows"] > 0 and sum(
        es["choice_at_best"][f"choice/share/{n}"] for n in SUPPORT_ROSTER.names
    ) == pytest.approx(1)
    assert (out / "adapter_config.json").exists() and not list((out / "trainer").glob("checkpoint-*"))


def test_a_roster_without_a_mapping_skips_the_stage_with_one_line(tmp_path):
    from mascot.pipeline.run import load_pipeline_config, run_pipeline
    from mascot.stages import STAGE_BY_KEY, stage_params

    roster = tmp_path / "mine.yaml"
    roster.write_text(
        "name: mine\ndomain: support\npersonas:\n- {name: Sage, role: listener, contribution: calm}\n- {name: Spark, role: guide, contribution: ideas}\n"
    )
    cfg_file = tmp_path / "skip.yaml"
    cfg_file.write_text(
        f"run_name: skip\ndataset: ED\nstages:\n  director_sft: {{strategy_path: 'demo:esconv', roster_path: '{roster}'}}\n"
    )
    lines = []
    run_dir = run_pipeline(load_pipeline_config(cfg_file, runs_dir=str(tmp_path / "runs")), log=lines.append)
    skipped = [l for l in lines if "skipped" in l]
    assert len(skipped) == 1 and "\n" not in skipped[0], lines
    assert skipped[0].startswith("[director_sft] skipped: roster 'mine' maps no ESConv supporter strategy"), skipped
    sdir = run_dir / "24_director_sft"
    assert "skipped" in json.loads((sdir / "outputs.json").read_text()) and not (sdir / "executed.ipynb").exists()
    # director GRPO starts from the SFT adapter when the stage made one, from the base model when it was skipped
    grpo = STAGE_BY_KEY["director_grpo"]
    cfg = load_pipeline_config(ROOT / "configs/smoke.yaml", runs_dir=str(tmp_path / "runs"))
    made = stage_params(cfg, grpo, run_dir, {"director_sft": {"path": str(tmp_path)}})
    assert made["init_adapter_path"] == str(tmp_path)
    assert "init_adapter_path" not in stage_params(cfg, grpo, run_dir, {"director_sft": {"skipped": "why"}})
