"`mascot compare` and the judge cache end to end: three systems on the same contexts, two served judges (one biased), a second run from the cache."

import json, math, sys
from pathlib import Path
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai_server import FakeOpenAIServer  # noqa: E402
from mascot.cli import main as cli  # noqa: E402

SYSTEMS = ("mascot", "zero-shot", "few-shot")
FAVOURED = "sunflower"  # only the mascot system's replies say it; judge b adds 3 points to every item that contains it
N_CONTEXTS = 20


def conversation(system: str, c: int) -> dict:
    "An ED conversation of `system` on context `c`: the same user lines for every system, two agent turns."
    agents = ["The Anchor", "The Catalyst"] if system == "mascot" else ["Supporter", "Supporter"]
    extra = f" A {FAVOURED} grows toward light." if system == "mascot" else ""
    speaker = (
        "mascot" if system == "mascot" else "baseline"
    )  # the two baselines say the same: equal systems for every judge
    turns = [
        {
            "turn_idx": 0,
            "round_id": 0,
            "turn_type": "user",
            "agent_name": "User",
            "response": f"Situation {c}: I lost my keys again.",
        }
    ]
    for i, a in enumerate(agents):
        turns.append(
            {
                "turn_idx": 2 * i + 1,
                "round_id": i,
                "turn_type": "agent",
                "agent_name": a,
                "directive": None,
                "directive_output": None,
                "response": f"Reply {i} of {speaker} on {c}: that sounds frustrating.{extra}",
            }
        )
        turns.append(
            {
                "turn_idx": 2 * i + 2,
                "round_id": i,
                "turn_type": "user",
                "agent_name": "User",
                "response": f"Thanks ({c}, {i}).",
            }
        )
    return {
        "conv_id": f"ed-{c}",
        "turns": turns,
        "metadata": {"system": system, "dataset": "ED", "valence": "negative", "split": "test"},
    }


@pytest.fixture
def convs(tmp_path):
    d = tmp_path / "eval"
    d.mkdir()
    for s in SYSTEMS:
        (d / f"{s}_ED_test.jsonl").write_text("".join(json.dumps(conversation(s, c)) + "\n" for c in range(N_CONTEXTS)))
    return d


@pytest.mark.served
@pytest.mark.integration
def test_biased_judge_shows_in_compare_and_the_cache_answers_a_rerun(convs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MASCOT_JUDGE_CACHE", str(tmp_path / "cache" / "judgements.sqlite"))
    with FakeOpenAIServer(model="judge-a") as a, FakeOpenAIServer(model="judge-b", judge_favour={FAVOURED: 3}) as b:
        panel = ["--judge", f"vllm:judge-a@{a.url}", "--judge", f"vllm:judge-b@{b.url}", "--request-timeout", "30"]
        out = tmp_path / "judged"
        assert cli(["judge-all", "--input-dir", str(convs), "--output-dir", str(out), *panel, "--no-progress"]) == 0
        first = (a.num_chat, b.num_chat)
        cached = json.loads((out / "judge_cache.json").read_text())
        total = 2 * N_CONTEXTS * len(SYSTEMS) * 3  # two judges; two persona items and one collective per conversation
        # the two baselines' identical items are answered once: from the cache, or by the same request while it is in flight
        assert (
            cached["hits"] + cached["misses"] == total
            and sum(first) == cached["stored"] == cached["misses"] - cached["shared"]
        )

        # a second identical run with --overwrite, and one into another folder: every judgement from the cache, no request
        assert (
            cli(
                [
                    "judge-all",
                    "--input-dir",
                    str(convs),
                    "--output-dir",
                    str(out),
                    *panel,
                    "--overwrite",
                    "--no-progress",
                ]
            )
            == 0
        )
        assert (
            cli(
                [
                    "judge-all",
                    "--input-dir",
                    str(convs),
                    "--output-dir",
                    str(tmp_path / "again"),
                    *panel,
                    "--no-progress",
                ]
            )
            == 0
        )
        assert (a.num_chat, b.num_chat) == first
        assert json.loads((out / "judge_cache.json").read_text())["hits"] == total
        assert (pd.read_csv(out / "judge_scores.csv")["score"].sum()) == pytest.approx(
            pd.read_csv(tmp_path / "again" / "judge_scores.csv")["score"].sum()
        )
        # --no-cache asks the servers again
        assert (
            cli(
                [
                    "judge-all",
                    "--input-dir",
                    str(convs),
                    "--output-dir",
                    str(tmp_path / "fresh"),
                    *panel,
                    "--no-cache",
                    "--no-progress",
                ]
            )
            == 0
        )
        assert (a.num_chat - first[0], b.num_chat - first[1]) == (total // 2, total // 2)

    capsys.readouterr()
    assert (
        cli(["compare", "--input-dir", str(out), "--reference", "zero-shot", "--output-dir", str(tmp_path / "cmp")])
        == 0
    )
    printed = capsys.readouterr().out
    assert "Persona Consistency" in printed and "comparison.csv" in printed
    t = pd.read_csv(tmp_path / "cmp" / "comparison.csv")
    assert {
        "judge",
        "metric",
        "system",
        "n_contexts",
        "mean",
        "mean_lo",
        "mean_hi",
        "delta",
        "delta_lo",
        "delta_hi",
        "failures",
    } <= set(t.columns)
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 1000 and (tmp_path / "cmp" / "comparison.md").exists()
    row = lambda j, s, m: t[(t.judge == j) & (t.system == s) & (t.metric == m)].iloc[0]
    # mascot's personas vs the baselines' generic card: a marked Δ, outside the Holm family
    for m in ("Persona Consistency", "Social Contribution"):
        r = row("judge-b", "mascot", m)
        assert not r.comparable and r.delta_lo <= r.delta <= r.delta_hi and math.isnan(r.p_holm), m
        fs = row("judge-b", "few-shot", m)  # two baselines on the same generic card: compared
        assert fs.comparable and fs.delta_lo <= 0 <= fs.delta_hi, m
    for m in ("Empathy", "Persona Overall", "Collective Overall"):
        assert row("judge-b", "mascot", m).delta_lo > 0, m  # the biased judge's favour: an interval excluding 0
        for j, s in (("judge-a", "mascot"), ("judge-a", "few-shot"), ("judge-b", "few-shot")):
            r = row(j, s, m)
            assert r.delta_lo <= 0 <= r.delta_hi, (j, s, m, r.delta_lo, r.delta_hi)
        ref = row("judge-a", "zero-shot", m)
        assert (ref.delta, ref.delta_lo, ref.delta_hi, ref.n_contexts) == (0, 0, 0, N_CONTEXTS)
    assert (t.failures == 0).all() and set(t.judge) == {"judge-a", "judge-b", "mean of judges"}
    # the judge stage wrote the same table (reference: mascot, the default)
    stage = pd.read_csv(out / "comparison.csv")
    assert set(stage.system) == set(SYSTEMS) and (stage[stage.system == "mascot"].delta == 0).all()
    assert len(pd.read_csv(tmp_path / "cmp" / "agreement.csv")) > 0


@pytest.mark.served
@pytest.mark.integration
def test_adding_a_judge_calls_only_the_new_one(convs, tmp_path, monkeypatch):
    monkeypatch.setenv("MASCOT_JUDGE_CACHE", str(tmp_path / "cache.sqlite"))
    one = convs / "mascot_ED_test.jsonl"
    with FakeOpenAIServer(model="judge-a") as a, FakeOpenAIServer(model="judge-b") as b:
        assert cli(["judge", "--input-file", str(one), "--judge", f"vllm:judge-a@{a.url}", "--no-progress"]) == 0
        asked = a.num_chat
        assert (
            cli(
                [
                    "judge",
                    "--input-file",
                    str(one),
                    "--judge",
                    f"vllm:judge-a@{a.url}",
                    "--judge",
                    f"vllm:judge-b@{b.url}",
                    "--overwrite",
                    "--no-progress",
                ]
            )
            == 0
        )
        assert a.num_chat == asked and b.num_chat == asked  # the old judge from the cache, the new one asked
    line = json.loads((convs / "scores_persona_mascot_ED_test.jsonl").read_text().splitlines()[0])
    assert line["judge"] == "judge-a" and set(line["by_judge"]) == {"judge-b"}


def test_compare_refuses_an_unknown_reference(tmp_path, capsys):
    (tmp_path / "scores_persona_x.jsonl").write_text(
        json.dumps(
            {
                "conv_id": "c",
                "kind": "persona",
                "system": "mascot",
                "dataset": "ED",
                "judge": "j",
                "items": [{"turn_idx": 1, "agent_name": "A", "scores": {"Consistency": 50.0}}],
            }
        )
        + "\n"
    )
    assert cli(["compare", "--input-dir", str(tmp_path), "--reference", "nope"]) == 2
    assert "--reference 'nope'" in capsys.readouterr().err
    assert cli(["compare", "--input-dir", str(tmp_path / "missing")]) == 2


# ---- intervals and the table's bookkeeping (no server) ----
import numpy as np  # noqa: E402
from mascot.evaluation.judged_scores import ITEM_COLUMNS  # noqa: E402
from mascot.evaluation.compare import (
    compare_table,
    comparison_markdown,
    run_compare,
    CompareConfig,
)  # noqa: E402
from mascot.evaluation.intervals import cluster_ci, coverage, interval_check  # noqa: E402


@pytest.mark.parametrize("n", [5, 10, 30, 100])
def test_default_interval_covers_at_every_printed_size(n):
    "Coverage of the default 95% interval ≥ 93% for means and paired deltas, normal and skewed scores (1,000 repetitions a cell up to n = 10, 500 above)."
    reps, resamples = (1000, 1999) if n <= 10 else (500, 499)
    for data in ("normal", "skewed"):
        for delta in (False, True):
            cov = coverage("studentized", n, data, delta, reps=reps, n_resamples=resamples)
            assert cov >= 0.93, (n, data, delta, cov)


# other data of the kinds bench/interval_coverage.py tabulates: other tie shares, score distributions, win rates and shifts
HELD_OUT = (
    ("judge", dict(untied=0.2, steps=(-3, -1, 1, 2), step_p=(0.15, 0.25, 0.4, 0.2))),
    ("judge", dict(untied=0.45, p=(0.0, 0.02, 0.03, 0.05, 0.1, 0.2, 0.25, 0.2, 0.1, 0.05))),
    ("likert", dict(untied=0.25, p=(0.1, 0.1, 0.3, 0.3, 0.2), step_p=(0.3, 0.7))),
    ("binary", dict(p=0.92, p_other=0.7)),
    ("shift", dict(shift=1.5)),
)


@pytest.mark.parametrize("data,kw", HELD_OUT, ids=[f"{d}-{i}" for i, (d, _) in enumerate(HELD_OUT)])
def test_default_interval_holds_on_tied_discrete_scores(data, kw):
    "On tied integer, Likert, win and shifted scores: every interval finite and inside the scale, coverage ≥ 93% at n = 10 and 30, null false positives ≤ 7% at n = 5 and 30."
    for n in (10, 30):
        for delta in (False, True):
            c = interval_check("studentized", n, data, delta, reps=400, n_resamples=499, seed=11, **kw)
            assert c["finite"] == 1.0 and c["coverage"] >= 0.93, (n, delta, c)
    for n in (5, 30):
        c = interval_check("studentized", n, data, True, reps=400, n_resamples=499, seed=12, effect=False, **kw)
        assert c["finite"] == 1.0 and 1 - c["coverage"] <= 0.07, (n, c)


def test_the_tied_cases_that_broke_the_bootstrap_t():
    "Paired differences with most contexts tied, and a constant shift with float noise: finite intervals holding the truth."
    for d in ([0.0] * 10 + [1, 2], [0.0] * 9 + [1, 1, 2]):
        m, lo, hi, _ = cluster_ci(np.array(d) * 100 / 9, scale=(-100, 100))
        assert -100 < lo < 0 < m < hi < 100, (lo, hi)
    shift = 100 * 3 / 9 + 1e-5 * np.random.default_rng(1).standard_normal(12)
    m, lo, hi, _ = cluster_ci(shift, scale=(-100, 100))
    assert np.isfinite([lo, hi]).all() and lo <= 100 * 3 / 9 <= hi and hi - lo < 1e-3, (lo, hi)


def test_the_coverage_check_can_fail():
    "The percentile bootstrap falls short of 93% at n = 5, and an interval that ignores tied samples misses: the checks above discriminate."
    assert coverage("percentile", 5, "skewed", reps=600, n_resamples=999) < 0.9
    assert coverage("percentile", 10, "judge", True, reps=400, n_resamples=499, untied=0.1) < 0.9


def items_of(rows: list[tuple]) -> pd.DataFrame:
    "Items from (system, context, score[, dataset, failed, criterion]) tuples: one judge, one persona criterion (Persona Overall)."
    out = []
    for r in rows:
        system, context, score, dataset, failed = (*r, "ED", False)[:5] if len(r) < 5 else r
        out.append(
            dict(
                judge="j",
                system=system,
                dataset=dataset,
                group="",
                kind="persona",
                context=context,
                turn_idx=1,
                agent="The Anchor",
                criterion="Overall",
                score=score,
                failed=failed,
            )
        )
    return pd.DataFrame(out, columns=ITEM_COLUMNS)


def test_means_and_deltas_are_on_the_same_contexts():
    "Reference on c0–c4, the other on c3–c7: both means and the Δ over c3, c4; the table says 3 contexts were dropped each."
    items = items_of(
        [("mascot", f"c{c}", 50.0 + c) for c in range(5)] + [("other", f"c{c}", 40.0 + c) for c in range(3, 8)]
    )
    t = compare_table(items, "mascot").set_index("system")
    assert (t["n_contexts"] == 2).all() and (t["n_dropped"] == 3).all()
    assert t.loc["mascot", "mean"] == 53.5 and t.loc["other", "mean"] == 43.5 and t.loc["other", "delta"] == -10.0


def test_a_nan_score_is_dropped_and_counted():
    items = items_of([("mascot", f"c{c}", 50.0) for c in range(6)] + [("mascot", "c6", math.nan)])
    r = compare_table(items).iloc[0]
    assert r["mean"] == 50.0 and r["n_contexts"] == 6 and (r["failures"], r["items"]) == (1, 7)


def test_qmsum_queries_cluster_by_meeting():
    "Eight queries of four meetings: four clusters, fewer than 5, so no interval however many queries."
    rows = [
        (s, f"Bed00{m}_{10 * q}_q{q}", 50.0 + m + q + (5 if s == "a" else 0), "QMSum", False)
        for s in "ab"
        for m in range(4)
        for q in range(2)
    ]
    t = compare_table(items_of(rows), "a").set_index("system")
    assert t.loc["b", "n_contexts"] == 8 and t.loc["b", "n_clusters"] == 4 and math.isnan(t.loc["b", "delta_lo"])
    assert "n too small" in comparison_markdown(compare_table(items_of(rows), "a"), "a")


def test_favoured_system_excludes_zero_and_holm_is_applied():
    "12 contexts × 3 systems, a judge favouring one by 8 points (noise sd 5): its Δ excludes 0, the other's includes 0; Holm p ≥ p."
    rng = np.random.default_rng(3)
    base = rng.normal(60, 8, 12)
    rows = [
        (s, f"c{c}", base[c] + rng.normal(0, 5) + (8 if s == "fav" else 0))
        for s in ("ref", "fav", "plain")
        for c in range(12)
    ]
    t = compare_table(items_of(rows), "ref").set_index("system")
    assert t.loc["fav", "delta_lo"] > 0 and t.loc["plain", "delta_lo"] <= 0 <= t.loc["plain", "delta_hi"]
    assert (t["p_holm"].dropna() >= t["p"].dropna()).all() and t["p_holm"].notna().sum() == 2


def score_line(system, conv_id, judge="j", failed=False, dataset="ED"):
    item = {"turn_idx": 1, "agent_name": "The Anchor"} | (
        {"failed": True} if failed else {"scores": {"Overall": 50.0 + int(conv_id[1:])}}
    )
    return (
        json.dumps(
            {
                "conv_id": conv_id,
                "kind": "persona",
                "system": system,
                "dataset": dataset,
                "judge": judge,
                "items": [item],
            }
        )
        + "\n"
    )


def test_reference_is_named_from_what_was_resolved(tmp_path):
    "A block where only zero-shot has rows comes first; the Markdown still names the reference asked for."
    (tmp_path / "scores_persona_a.jsonl").write_text(
        "".join(score_line("zero-shot", f"c{c}", dataset="ESConv") for c in range(6))
    )
    (tmp_path / "scores_persona_b.jsonl").write_text("".join(score_line("mascot", f"c{c}") for c in range(6)))
    paths = run_compare(CompareConfig(input_dir=str(tmp_path), reference="mascot", n_resamples=200))
    assert paths["md"].read_text().startswith("# Comparison against `mascot`")
    assert "never pooled" not in paths["md"].read_text()


def test_every_failure_of_an_unwritten_conversation_counts(tmp_path):
    "A conversation whose 5 judgements all failed (recorded as unwritten) counts 5 failures, not 1 of 1."
    (tmp_path / "scores_persona_m.jsonl").write_text("".join(score_line("mascot", f"c{c}") for c in range(6)))
    unwritten = [{"conv_id": "c9", "system": "mascot", "dataset": "ED", "by_judge": {"j": 5}}]
    (tmp_path / "metrics_persona_m.json").write_text(json.dumps({"unwritten": unwritten}))
    paths = run_compare(CompareConfig(input_dir=str(tmp_path), n_resamples=200))
    r = pd.read_csv(paths["csv"]).iloc[0]
    assert (r["failures"], r["items"], r["n_contexts"]) == (5, 11, 6)


def test_an_empty_folder_is_one_clear_line(tmp_path, capsys):
    assert cli(["compare", "--input-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no judged conversations" in err[0] and "Traceback" not in err[0]


def test_ppi_recovers_what_people_say_from_a_biased_judge():
    "A judge 8 points too generous (r ≈ 0.9 with people), 60 of 300 contexts rated by people, 800 repetitions: the PPI++ interval holds the people's mean ≥ 93% of the time and is narrower than the 60 ratings alone."
    from mascot.evaluation.human_calibration import ppi_mean

    rng, hits, narrower = np.random.default_rng(0), 0, 0
    for _ in range(800):
        truth = rng.normal(60, 10, 300)
        judge = truth + 8 + rng.normal(0, 4, 300)
        r = ppi_mean(truth[:60], judge[:60], judge[60:])
        hits += r["lo"] <= 60 <= r["hi"]
        narrower += (r["hi"] - r["lo"]) < (r["human_hi"] - r["human_lo"])
    assert hits / 800 >= 0.93 and narrower == 800


def test_compare_human_writes_the_corrected_columns(tmp_path, capsys):
    "mascot compare --human on a small rating file: PPI++ columns in comparison.csv, a calibrated section and the contexts --power asks for."
    for s in ("mascot", "other"):
        (tmp_path / f"scores_persona_{s}.jsonl").write_text("".join(score_line(s, f"c{c}") for c in range(12)))
    rows = [
        dict(system=s, context=f"c{c}", metric="Persona Overall", score=40.0 + c + (2 if s == "other" else 0), rater=k)
        for s in ("mascot", "other")
        for c in range(6)
        for k in range(2)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "human.csv", index=False)
    args = ["compare", "--input-dir", str(tmp_path), "--human", str(tmp_path / "human.csv"), "--power", "3"]
    assert cli(args) == 0
    t = pd.read_csv(tmp_path / "comparison.csv").set_index("system")
    assert t.loc["mascot", "human_n"] == 6 and t.loc["other", "ppi_delta"] == pytest.approx(2.0)
    assert (
        "Calibrated against people" in capsys.readouterr().out
        or "Calibrated" in (tmp_path / "comparison.md").read_text()
    )
    assert "n_for_delta" in t.columns
    pd.DataFrame(rows).drop(columns="score").to_csv(tmp_path / "bad.csv", index=False)
    assert cli(["compare", "--input-dir", str(tmp_path), "--human", str(tmp_path / "bad.csv")]) == 2
    assert "missing column(s) score" in capsys.readouterr().err


def test_compare_human_takes_arena_votes(tmp_path):
    "Arena votes on 6 of 12 contexts: the share preferring `other` over mascot, votes alone and PPI++ corrected, in comparison.csv."
    for s in ("mascot", "other"):
        (tmp_path / f"scores_persona_{s}.jsonl").write_text("".join(score_line(s, f"c{c}") for c in range(12)))
    votes = [
        {"pair_id": f"c{c}", "systems": ["mascot", "other"], "winner": "other" if c < 4 else "tie", "annotator": "x"}
        for c in range(6)
    ]
    (tmp_path / "votes.jsonl").write_text("".join(json.dumps(v) + "\n" for v in votes))
    assert cli(["compare", "--input-dir", str(tmp_path), "--human", str(tmp_path / "votes.jsonl")]) == 0
    r = pd.read_csv(tmp_path / "comparison.csv").set_index("system").loc["other"]
    assert (r["vote_n"], r["vote_win"]) == (6, pytest.approx(5 / 6)) and r["ppi_win_lo"] <= r["ppi_win"] <= r[
        "ppi_win_hi"
    ]
    assert "Calibrated against people's votes" in (tmp_path / "comparison.md").read_text()


# ---- degenerate judged inputs never crash `mascot compare`; the paper's comparison across persona cards is marked ----
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from mascot.evaluation.compare import CARD_MARK, CARD_NOTE, N_LEGEND  # noqa: E402

STEP = 100 / 9  # one step of a 1-10 judge on the 0-100 scale
OUTPUTS = ("comparison.csv", "comparison.md", "comparison.png", "agreement.csv")


def judged_dir(d: Path, systems: dict, contexts: int, judges: int, score, failed=lambda *k: False) -> Path:
    """Score files as `mascot judge` writes them: `systems` maps a system to its speaker (a roster persona or the generic
    Supporter), `score(system, context, judge, criterion)` gives each 0-100 score, `failed(...)` marks a judgement failed."""
    crit = {"persona": ("Consistency", "Contribution", "Overall", "Empathy"), "collective": ("Fidelity", "Overall")}
    for s, agent in systems.items():
        for kind in ("persona", "collective"):

            def part(c, j):
                head = {"turn_idx": 1, "agent_name": agent} if kind == "persona" else {}
                if failed(s, c, j):
                    return {"items": [head | {"failed": True}]}
                return {"items": [head | {"scores": {k: score(s, c, j, k) for k in crit[kind]}}]}

            lines = [
                {"conv_id": f"c{c}", "kind": kind, "system": s, "dataset": "ED", "judge": "j0", **part(c, 0)}
                | {"by_judge": {f"j{j}": part(c, j) for j in range(1, judges)}}
                for c in range(contexts)
            ]
            (d / f"scores_{kind}_{s}_ED.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def compare_never_crashes(d: Path, capsys, *flags) -> tuple[int, pd.DataFrame | None]:
    "`mascot compare` on `d`: exit 0 with every output written and every bound finite inside its scale, or 2 with one line."
    rc = cli(["compare", "--input-dir", str(d), "--output-dir", str(d / "out"), "--n-resamples", "99", *flags])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err, (rc, err)
    if rc == 2:
        assert len(err.strip().splitlines()) == 1, err
        return rc, None
    assert all((d / "out" / f).stat().st_size > 0 for f in OUTPUTS)
    t = pd.read_csv(d / "out" / "comparison.csv")
    for cols, (lo, hi) in (
        (["mean", "mean_lo", "mean_hi"], (0, 100)),
        (["delta", "delta_lo", "delta_hi"], (-100, 100)),
    ):
        v = t[cols].to_numpy(dtype=float)
        assert np.isnan(v[~np.isfinite(v)]).all() and ((v[~np.isnan(v)] >= lo) & (v[~np.isnan(v)] <= hi)).all(), cols
    assert N_LEGEND in (d / "out" / "comparison.md").read_text()
    return rc, t


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n_systems=st.integers(1, 3),
    generic=st.booleans(),
    contexts=st.integers(1, 7),
    judges=st.integers(1, 2),
    levels=st.lists(st.sampled_from([0.0, STEP, 4 * STEP, 5 * STEP, 100.0, math.nan]), min_size=1, max_size=2),
    untied=st.sampled_from([0.0, 0.15, 0.5]),
    fail_share=st.sampled_from([0.0, 0.3, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_compare_never_crashes_on_degenerate_judgements(
    tmp_path_factory, capsys, n_systems, generic, contexts, judges, levels, untied, fail_share, seed
):
    """All ties, one context, constant scores, one system, NaN-only scores, all judgements failed, a judge that always answers
    the same: a table with finite bounds inside the scale (exit 0) or one line on stderr (exit 2), never a traceback."""
    rng = np.random.default_rng(seed)
    speakers = {
        "mascot": "The Anchor",
        "zero-shot": "Supporter" if generic else "The Catalyst",
        "few-shot": "Supporter",
    }
    systems = dict(list(speakers.items())[:n_systems])
    base = {c: rng.choice(levels) for c in range(contexts)}  # a context's score, tied across systems and judges
    score = lambda s, c, j, k: float(np.clip(base[c] + rng.choice([-STEP, STEP]) * (rng.random() < untied), 0, 100))
    failed = lambda s, c, j: rng.random() < fail_share
    d = judged_dir(tmp_path_factory.mktemp("judged"), systems, contexts, judges, score, failed)
    compare_never_crashes(d, capsys)


def test_forty_tied_judges_write_the_png(tmp_path, capsys):
    "12 contexts × 40 judges whose paired scores tie except one step on 15% of criteria: every output, finite bounds."
    rng = np.random.default_rng(1)
    base = rng.integers(3, 8, 12) * STEP
    score = lambda s, c, j, k: float(base[c] + (s == "zero-shot") * rng.choice([-STEP, STEP]) * (rng.random() < 0.15))
    d = judged_dir(tmp_path, {"mascot": "The Anchor", "zero-shot": "The Catalyst"}, 12, 40, score)
    rc, t = compare_never_crashes(d, capsys, "--metrics", "Persona Consistency", "Collective Overall")
    assert rc == 0 and t["delta_lo"].notna().all()


def test_a_single_agent_reference_gives_a_marked_delta(tmp_path, capsys):
    "mascot (roster persona) against zero-shot (generic card): Persona Consistency and Social Contribution get a Δ marked †."
    rng = np.random.default_rng(2)
    base = rng.integers(3, 7, 8) * STEP
    score = lambda s, c, j, k: float(base[c] + (s == "mascot") * STEP * rng.integers(0, 3))
    d = judged_dir(tmp_path, {"mascot": "The Anchor", "zero-shot": "Supporter"}, 8, 1, score)
    rc, t = compare_never_crashes(d, capsys, "--reference", "zero-shot")
    md = (d / "out" / "comparison.md").read_text()
    for m in ("Persona Consistency", "Social Contribution"):
        r = t[(t.system == "mascot") & (t.metric == m)].iloc[0]
        assert not r.comparable and r.delta_lo <= r.delta <= r.delta_hi and r.delta > 0 and math.isnan(r.p_holm), m
        assert f" {CARD_MARK} |" in next(line for line in md.splitlines() if line.startswith(f"| {m} | mascot |"))
    assert t[(t.system == "mascot") & (t.metric == "Empathy")].comparable.all() and CARD_NOTE in md
    assert "--reference untrained" in md
