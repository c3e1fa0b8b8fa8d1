"""bench/director_strategy.py's reading of an ESConv strategy file and its metric, on a small file in the authors' format made here."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("director_strategy", ROOT / "bench" / "director_strategy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _line(*segs) -> str:
    "One state: segments '<float> <speaker> <turn index> <text>' joined by ' EOS ', the last one the supporter's turn."
    return " EOS ".join(f"{f:.1f} {sp} {i} {t}" for f, (sp, i, t) in zip([0.0] * (len(segs) - 1) + [1.0], segs))


def test_states_conversations_labels_and_metric(tmp_path):
    b = _bench()
    lines = [
        _line(("0", 0, "I feel so alone since the move."), ("1", 1, "[Reflection of feelings] That sounds lonely.")),
        _line(
            ("0", 0, "I feel so alone since the move."),
            ("1", 1, "[Reflection of feelings] That sounds lonely."),
            ("1", 2, "[Questions] When did you move?"),
        ),  # fmt: skip
        _line(
            ("1", 2, "[Questions] When did you move?"),
            ("0", 3, "Last month."),
            ("1", 4, "[Self-disclosure] I moved too."),
        ),
        _line(
            ("0", 0, "My exam went badly."), ("1", 1, "[Affirmation and Reassurance] You prepared well.")
        ),  # index restarts
        _line(("0", 0, "Hi"), ("1", 1, "[Other] Hello")),
        _line(
            ("0", 0, "Hi"),
            ("1", 1, "[Other] Hello"),
            ("0", 2, "I lost my job."),
            ("1", 3, "[Information] Benefits exist."),
        ),
    ]
    f = tmp_path / "dev.tsv"
    f.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    states = b.read_states(f)
    # Self-disclosure and Other left out; conversations split where the turn index does not grow
    assert [s["label"] for s in states] == ["The Anchor", "The Catalyst", "The Beacon", "The Catalyst"]
    assert [s["conversation"].split("#")[1] for s in states] == ["0", "0", "1", "2"]
    # the strategy bracket is read off the supporter turns of the history, and the state's own turn is not in its history
    assert states[1]["history"] == [("0", "I feel so alone since the move."), ("1", "That sounds lonely.")]
    assert "Hello" in b.prompt_of(states[3])[1]["content"] and "[Other]" not in b.prompt_of(states[3])[1]["content"]

    labels = [s["label"] for s in states]
    assert b.balanced_accuracy(labels, ["The Catalyst"] * 4)["balanced_accuracy"] == pytest.approx(1 / 3, abs=1e-4)
    boot = b.Bootstrap(states, n_boot=200)
    assert b.summary_of(boot.curve([labels])) == {"mean": 1.0, "ci95": [1.0, 1.0]}
    assert b.summary_of(boot.curve([["The Catalyst"] * 4]))["mean"] == pytest.approx(1 / 3, abs=1e-4)

    bad = tmp_path / "bad.tsv"
    bad.write_text(_line(("0", 0, "Hi"), ("1", 1, "[Small talk] Hello")) + "\n")
    with pytest.raises(ValueError, match=r"bad.tsv:1: unknown strategy \[Small talk\]"):
        b.read_states(bad)
