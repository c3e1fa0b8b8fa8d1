"The figures stage end to end: a hand-made judge table and auto-metrics file, every figure notebook really executed by papermill."

import json, os
from pathlib import Path
import pandas as pd
import pytest
from mascot.evaluation.figures import FiguresConfig, run_figures, figures_nbs
from mascot.evaluation.figure_tables import SCORE_COLUMNS

NAMES = [
    "f01_persona_table_ed",
    "f02_collective_table_ed",
    "f03_qmsum_collective",
    "f04_ablation",
    "f05_sensitivity",
    "f06_big_five_heatmap",
    "f07_arena",
]
PERSONA = ["Emotion", "Empathy", "Consistency", "Relevance", "Contribution"]
COLLECTIVE = ["Fidelity", "Originality", "Relevance", "Engagement", "Coherence"]


def rows(system, dataset, group, conv, kind, agent, scores, big_five=""):
    "One judged item: a score per criterion, and Overall as their mean."
    crits = PERSONA if kind == "persona" else COLLECTIVE
    return [
        dict(
            system=system,
            dataset=dataset,
            split="test",
            conv_id=conv,
            group=group,
            big_five=big_five,
            kind=kind,
            agent=agent,
            criterion=c,
            score=s,
            judge="judge-a",
        )
        for c, s in zip(crits + ["Overall"], scores + [sum(scores) / len(scores)])
    ]


def ed_rows():
    out = []
    for system, base in (("mascot", 80), ("mascot-p", 70), ("mascot-c", 72), ("zero-shot", 60)):
        for group, shift in (("positive", 0), ("negative", -6)):
            for i, (agent, profile) in enumerate(
                (("The Anchor", "High Openness"), ("The Catalyst", "Low Neuroticism"))
            ):
                conv = f"ed-{group}-{i}"
                out += rows(
                    system,
                    "ED",
                    group,
                    conv,
                    "persona",
                    agent,
                    [base + shift + d for d in (1, 3 * i, -2, 5 - i, 2)],
                    profile,
                )
                out += rows(
                    system,
                    "ED",
                    group,
                    conv,
                    "collective",
                    "",
                    [base + shift - 5 + d for d in (2 * i, 0, 4, -1, i)],
                    profile,
                )
    return out


def qmsum_rows():
    return [
        r
        for system, base in (("mascot", 75), ("zero-shot", 55))
        for domain in ("Academic", "Committee", "Product")
        for i in range(2)
        for r in rows(
            system, "QMSum", domain, f"{domain}-{i}", "collective", "", [base + 4 * i + d for d in (0, 2, -3, 1, 5)]
        )
    ]


def write_scores(folder: Path, recs) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(recs, columns=list(SCORE_COLUMNS)).to_csv(folder / "judge_scores.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figures")
    judge = write_scores(tmp / "judge", ed_rows())  # no QMSum rows
    (tmp / "metrics").mkdir()
    m = lambda c, b, e: {
        "contradiction_rate": c,
        "num_pairs": 10,
        "self_bleu": b,
        "num_replies": 12,
        "echo_score": e,
        "num_echo_pairs": 10,
    }
    (tmp / "metrics/auto_metrics_ed.json").write_text(
        json.dumps(
            {
                "input_file": "ed.jsonl",
                "settings": {},
                "overall": m(0.1, 30.0, 0.5),
                "by_system": {
                    "mascot": m(0.05, 20.0, 0.4),
                    "mascot-p": m(0.1, 35.0, None),
                    "zero-shot": m(0.2, 40.0, 0.7),
                },
                "by_group": {},
                "conversations": [],
            }
        )
    )
    cwd = os.getcwd()
    figs = run_figures(
        FiguresConfig(
            judge_dir=str(judge), metrics_dir=str(tmp / "metrics"), output_dir=str(tmp / "out"), progress=False
        )
    )
    # the notebooks run two at a time: none may move this process's working directory (papermill's cwd= chdirs the process)
    assert os.getcwd() == cwd
    return tmp, figs


@pytest.mark.integration
def test_every_figure_written(stage):
    tmp, figs = stage
    assert sorted(figs) == NAMES == sorted(p.stem for p in figures_nbs().glob("*.ipynb"))
    for n in NAMES:
        d = tmp / "out" / n
        assert figs[n] == d / f"{n}.png"
        for f in (f"{n}.png", f"{n}.csv", "executed.ipynb"):
            assert (d / f).stat().st_size > 0, d / f


def test_f01_numbers_are_the_inputs_means(stage):
    "f01 reads mascot compare's table: per judge, the mean over contexts of each conversation's mean, with a 95% interval."
    tmp, _ = stage
    src = pd.read_csv(tmp / "judge/judge_scores.csv")
    out = pd.read_csv(tmp / "out/f01_persona_table_ed/f01_persona_table_ed.csv")
    assert out.columns.tolist() == [
        "judge",
        "group",
        "system",
        "metric",
        "n_contexts",
        "mean",
        "mean_lo",
        "mean_hi",
        "failures",
        "items",
    ]
    paper = ["Emotion", "Empathy", "Persona Consistency", "Relevance", "Social Contribution", "Persona Overall"]
    assert len(out) == 2 * 4 * 6 and sorted(out.metric.tolist()[:6]) == sorted(paper) and out.system.iloc[0] == "mascot"
    assert set(out.judge) == {"judge-a"}  # one judge: no judge-averaged rows
    for group, system, crit, metric in (
        ("positive", "mascot", "Empathy", "Empathy"),
        ("negative", "zero-shot", "Overall", "Persona Overall"),
        ("negative", "mascot-p", "Consistency", "Persona Consistency"),
    ):
        s = (
            src[
                (src.dataset == "ED")
                & (src.kind == "persona")
                & (src.group == group)
                & (src.system == system)
                & (src.criterion == crit)
            ]
            .groupby("conv_id")
            .score.mean()
        )
        row = out[(out.group == group) & (out.system == system) & (out.metric == metric)].iloc[0]
        assert row["mean"] == pytest.approx(s.mean()) and row["n_contexts"] == len(s) == 2
        assert pd.isna(row["mean_lo"]) and pd.isna(row["mean_hi"])  # two contexts: too few for an interval
    assert out.loc[
        (out.group == "positive") & (out.system == "mascot") & (out.metric == "Empathy"), "mean"
    ].item() == pytest.approx(81.5)


def test_f03_without_qmsum_says_so(stage):
    tmp, _ = stage
    d = tmp / "out/f03_qmsum_collective"
    csv = pd.read_csv(d / "f03_qmsum_collective.csv")
    assert len(csv) == 0 and csv.columns.tolist() == ["group", "system", "criterion", "mean", "std", "n"]
    assert "no QMSum collective rows" in (d / "executed.ipynb").read_text()


def test_other_figures(stage):
    tmp, _ = stage
    f04 = pd.read_csv(tmp / "out/f04_ablation/f04_ablation.csv")
    assert set(f04.system) == {"mascot", "mascot-p", "mascot-c"} and set(f04.kind) == {"persona", "collective", "auto"}
    assert {"judge", "mean_lo", "mean_hi"} <= set(f04.columns) and "Persona Consistency" in set(f04.criterion)
    auto = f04[f04.kind == "auto"].set_index(["system", "criterion"])["mean"]
    assert auto[("mascot", "self_bleu")] == 20.0 and pd.isna(auto[("mascot-p", "echo_score")])
    f05 = pd.read_csv(tmp / "out/f05_sensitivity/f05_sensitivity.csv")
    assert set(f05.label) == {"this run"} and len(f05) == 2  # one run: one point per kind (ED only)
    f06 = pd.read_csv(tmp / "out/f06_big_five_heatmap/f06_big_five_heatmap.csv")
    assert (
        set(zip(f06.agent, f06.big_five)) == {("The Anchor", "High Openness"), ("The Catalyst", "Low Neuroticism")}
        and (f06.n == 2).all()
    )


def run_figure(name: str, out: Path, **parameters):
    "A figure notebook executed into `out` (its working folder) with `parameters`, as the figures stage runs it."
    from mascot.core.runtime import execute_notebook

    return execute_notebook(figures_nbs() / f"{name}.ipynb", out / "executed.ipynb", parameters, cwd=str(out))


def test_f03_with_qmsum(tmp_path):
    judge = write_scores(tmp_path / "judge", ed_rows() + qmsum_rows())
    out = tmp_path / "out"
    out.mkdir()
    run_figure("f03_qmsum_collective", out, judge_dir=str(judge), out_dir=str(out))
    csv = pd.read_csv(out / "f03_qmsum_collective.csv")
    assert len(csv) == 3 * 2 * 6 and csv.group.drop_duplicates().tolist() == ["Academic", "Committee", "Product"]
    row = csv[(csv.group == "Committee") & (csv.system == "mascot") & (csv.criterion == "Coherence")].iloc[0]
    assert (row["mean"], row["n"]) == (pytest.approx(82.0), 2) and row["std"] == pytest.approx(
        pd.Series([80.0, 84.0]).std()
    )
    assert (out / "f03_qmsum_collective.png").stat().st_size > 10_000


def test_f07_without_votes_says_no_human_study(stage):
    "A pipeline run has no human votes: the arena figure says so instead of drawing a demo."
    tmp, _ = stage
    out = pd.read_csv(tmp / "out/f07_arena/f07_arena.csv")
    assert out.empty and list(out.columns) == [
        "system",
        "wins",
        "losses",
        "ties",
        "n",
        "win_rate",
        "ci_low",
        "ci_high",
        "decisive_win_rate",
    ]


def test_f04_names_the_interval_only_where_drawn_and_hides_nothing(stage, tmp_path):
    """Four contexts per system (below 5): f04 draws no whisker and its title says why; eight contexts judged by the embedded judge (its
    long name in the title): the intervals are drawn and named. Either way `save_fig` found no title, legend or footer over another or
    over the bars (it raises when one is)."""
    tmp, _ = stage
    assert (
        "mean over contexts (no interval: fewer than 5 contexts); judge judge-a"
        in (tmp / "out/f04_ablation/executed.ipynb").read_text()
    )
    rows = [dict(r, judge="smollm2-135m-instruct", conv_id=f"{r['conv_id']}-{k}") for k in range(2) for r in ed_rows()]
    judge, out = write_scores(tmp_path / "judge", rows), tmp_path / "out"
    out.mkdir()
    run_figure("f04_ablation", out, judge_dir=str(judge), metrics_dir=str(tmp / "metrics"), out_dir=str(out))
    assert (
        "[95% bootstrap CI]; judge smollm2-135m-instruct (135M: plumbing check)" in (out / "executed.ipynb").read_text()
    )
    judged = pd.read_csv(out / "f04_ablation.csv").query("kind != 'auto'")
    assert judged.mean_lo.notna().all() and (judged.n == 8).all()
