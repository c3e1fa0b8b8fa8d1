"`mascot compare` and the judge cache end to end: three systems on the same contexts, two served judges (one biased), a second run from the cache."

import json, sys
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
    for m in ("Persona Consistency", "Social Contribution", "Collective Overall"):
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
