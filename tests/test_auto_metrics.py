"`mascot metrics` on hand-written conversations: pairing, NLI direction, legacy rounds, Self-BLEU, echo, the real NLI path on a tiny local model."

import json, subprocess, sys
from pathlib import Path
import pytest
from mascot.core.records import Directive, Episode, EpisodeMetadata, Turn
from mascot.evaluation.auto_metrics import *
from mascot.evaluation.text_scorers import *
from mascot.testing import tiny_nli_model


def episode(conv_id, lines, system="mascot", **meta) -> dict:
    "A record in the SPEC schema from (round, speaker, text) lines; speaker `User` is a user turn."
    turns = [
        Turn(i, r, who, text, turn_type="user")
        if who == "User"
        else Turn(i, r, who, text, Directive(who, "support", "warm"), "{}")
        for i, (r, who, text) in enumerate(lines)
    ]
    return Episode(conv_id, turns, EpisodeMetadata(system, "ED", "m", "m", extra=meta)).to_dict()


def write_jsonl(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def strip_round_ids(rec: dict) -> dict:
    for t in rec["turns"]:
        t.pop("round_id")
    return rec


def flags_a_then_b(premises, hypotheses):
    "Fake NLI: contradiction only when A's turn is the premise and B's the hypothesis."
    return [0.95 if p.startswith("A:") and h.startswith("B:") else 0.05 for p, h in zip(premises, hypotheses)]


def no_embedder(texts):
    raise AssertionError("the embedder should not be needed")


@pytest.fixture(scope="module")
def embedder():
    return SentenceEmbedder()


def test_same_round_pairs_exactly_the_expected_turns():
    rec = episode(
        "c",
        [
            (0, "User", "hi"),
            (0, "Anchor", "a0"),
            (0, "Catalyst", "c0"),
            (0, "Anchor", "a0b"),
            (1, "User", "ok"),
            (1, "Beacon", "b1"),
            (2, "Anchor", "a2"),
            (2, "Anchor", "a2b"),
            (2, "Beacon", "b2"),
        ],
    )
    turns = conversation_from_record(rec).turns
    got = [(a.response, b.response) for a, b in turn_pairs(turns, "same-round")]
    # different agents, same round, earlier first; Anchor's two round-2 turns are not paired with each other
    assert got == [("a0", "c0"), ("c0", "a0b"), ("a2", "b2"), ("a2b", "b2")]
    assert len(turn_pairs(turns, "all-pairs")) == 7 * 6 // 2
    assert [(a.response, b.response) for a, b in turn_pairs(turns, "adjacent-agent")][2:4] == [
        ("a0b", "b1"),
        ("b1", "a2"),
    ]


def test_temporal_vs_bidirectional(tmp_path):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [
            episode("ab", [(0, "A", "A: it will rain"), (0, "B", "B: it will be sunny")]),
            episode("ba", [(0, "B", "B: it will be sunny"), (0, "A", "A: it will rain")]),
        ],
    )

    def rates(direction):
        rep = evaluate(
            MetricsConfig(input_file=str(path), nli_direction=direction, progress=False),
            scorer=flags_a_then_b,
            embed=lambda t: [[1.0]] * len(t),
        )
        return [r["num_contradictions"] for r in rep["conversations"]], rep["overall"]["contradiction_rate"]

    assert rates("temporal") == ([1, 0], 0.5)  # only where A spoke first is A the premise
    assert rates("bidirectional") == ([1, 1], 1.0)  # either direction counts


def test_legacy_file_needs_round_inference(tmp_path):
    rec = strip_round_ids(
        episode(
            "old",
            [
                (0, "User", "I failed."),
                (0, "A", "A: so sorry"),
                (0, "B", "B: try again"),
                (1, "User", "ok"),
                (1, "C", "C: you can do it"),
            ],
        )
    )
    path = write_jsonl(tmp_path / "legacy.jsonl", [rec])
    with pytest.raises(RoundIdError, match=r"legacy\.jsonl.*--allow-round-inference"):
        main(["--input-file", str(path), "--skip-nli", "--output-file", str(tmp_path / "m.json")])
    rep = evaluate(
        MetricsConfig(input_file=str(path), allow_round_inference=True),
        scorer=flags_a_then_b,
        embed=lambda t: [[1.0]] * len(t),
    )
    # each agent turn opens a round (director -> speaker (-> user)), so one speaker per inferred round: no same-round pairs
    assert (
        rep["overall"]["num_pairs"],
        rep["overall"]["num_contradictions"],
        rep["num_conversations_rounds_inferred"],
    ) == (0, 0, 1)
    explicit = evaluate(
        MetricsConfig(input_file=str(path), pairing_mode="all-pairs"), scorer=flags_a_then_b, embed=no_embedder
    )
    assert explicit["overall"]["num_pairs"] == 3 and explicit["overall"]["echo_score"] is None


@pytest.mark.parametrize("user_simulation", [False, True])
def test_recorded_and_inferred_rounds_give_the_same_pairs(tmp_path, user_simulation):
    "Rounds as `mascot episode` records them (one per director step, with or without user replies) pair as their inferred rounds do."
    lines = [(0, "User", "I failed.")]
    for r, who in enumerate(["A", "B", "A", "C"]):
        lines.append((r, who, f"{who}: reply {r}"))
        if user_simulation and r % 2 == 0:
            lines.append((r, "User", f"ok {r}"))
    recorded = episode("e", lines)
    counts = {}
    for mode in ("same-round", "all-pairs", "adjacent-agent"):
        for name, rec in (("recorded", recorded), ("inferred", strip_round_ids(json.loads(json.dumps(recorded))))):
            path = write_jsonl(tmp_path / f"{name}.jsonl", [rec])
            rep = evaluate(
                MetricsConfig(input_file=str(path), pairing_mode=mode, allow_round_inference=True),
                scorer=lambda p, h: [0.9] * len(p),
                embed=lambda t: [[1.0]] * len(t),
            )
            counts[mode, name] = (rep["overall"]["num_pairs"], rep["overall"]["num_echo_pairs"])
        assert counts[mode, "recorded"] == counts[mode, "inferred"], (mode, counts)
    assert counts["all-pairs", "recorded"][0] == 6


def test_self_bleu_extremes():
    assert all(abs(s - 100) < 1e-6 for s in self_bleu_scores(["I hear how hard this is for you."] * 4))
    different = self_bleu_scores(
        ["The quarterly budget was approved yesterday", "Try a short walk after lunch", "Your feelings make sense"]
    )
    assert max(different) < 1


def test_echo_orders_paraphrases_above_unrelated(tmp_path, embedder):
    recs = [
        episode(
            "echo",
            [
                (0, "Anchor", "That sounds really painful, I'm so sorry."),
                (0, "Beacon", "I'm so sorry, that sounds really painful."),
                (0, "Catalyst", "That sounds really painful, I'm so sorry."),
            ],
            valence="negative",
        ),
        episode(
            "varied",
            [
                (0, "Anchor", "That sounds really painful, I'm so sorry."),
                (0, "Beacon", "Which small step could you take tomorrow?"),
                (0, "Catalyst", "The budget review is on Thursday."),
            ],
            valence="positive",
        ),
    ]
    rep = evaluate(
        MetricsConfig(input_file=str(write_jsonl(tmp_path / "e.jsonl", recs)), skip_nli=True), embed=embedder
    )
    echo, varied = rep["conversations"]
    assert echo["echo_score"] > 0.9 and varied["echo_score"] < 0.3 and echo["self_bleu"] > varied["self_bleu"]
    assert rep["by_group"]["mascot"]["negative"]["echo_score"] == pytest.approx(echo["echo_score"])


@pytest.mark.integration
def test_real_nli_path_end_to_end(tmp_path):
    nli = tiny_nli_model(tmp_path / "nli", labels=("entailment", "neutral", "contradiction"), favour="contradiction")
    recs = [
        episode(
            "m",
            [
                (0, "User", "I lost my job."),
                (0, "A", "A: you will find work"),
                (0, "B", "B: that is a real loss"),
                (1, "C", "C: what helps?"),
            ],
            valence="negative",
        ),
        episode(
            "z",
            [(0, "Supporter", "I am here."), (1, "Supporter", "Tell me more.")],
            system="zero-shot",
            valence="negative",
        ),
    ]
    data = write_jsonl(tmp_path / "conv.jsonl", recs)
    out = main(["--input-file", str(data), "--nli-model", str(nli), "--batch-size", "2", "--no-progress"])
    assert out == tmp_path / "auto_metrics_conv.json"
    rep = json.loads(out.read_text())
    assert (rep["overall"]["num_pairs"], rep["overall"]["contradiction_rate"]) == (1, 1.0)
    assert (
        rep["by_system"]["zero-shot"]["num_pairs"] == 0 and rep["by_system"]["zero-shot"]["contradiction_rate"] is None
    )
    assert set(rep["by_group"]["mascot"]) == {"negative"}
    assert {k: rep["settings"][k] for k in ("nli_model", "pairing_mode", "nli_direction")} == {
        "nli_model": str(nli),
        "pairing_mode": "same-round",
        "nli_direction": "temporal",
    }
    # the console entry point: `mascot metrics`, all pairs, both directions; favouring entailment finds nothing
    nli_e = tiny_nli_model(tmp_path / "nli_e", favour="ENTAILMENT")
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from mascot.cli import main; sys.exit(main())",
            "metrics",
            "--input-file",
            str(data),
            "--nli-model",
            str(nli_e),
            "--pairing-mode",
            "all-pairs",
            "--nli-direction",
            "bidirectional",
            "--output-file",
            str(tmp_path / "all.json"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads((tmp_path / "all.json").read_text())
    assert (rep["overall"]["num_pairs"], rep["overall"]["num_contradictions"]) == (3 + 1, 0)
