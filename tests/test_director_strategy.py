"""bench/director_strategy.py's reading of an ESConv strategy file and its metric, on a small file in the authors' format made here."""

import importlib.util, json
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


def test_esconv_json_written_as_a_strategy_file(tmp_path):
    "bench/esconv_strategy_file.py: ESConv.json conversations as lines of the authors' short format, read back by read_states."
    spec = importlib.util.spec_from_file_location("esconv_strategy_file", ROOT / "bench" / "esconv_strategy_file.py")
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)

    def utt(speaker, content, strategy=None):
        return {"speaker": speaker, "annotation": {"strategy": strategy} if strategy else {}, "content": content}

    shared = "I hear that the move has left you without the people you used to lean on."
    convs = [
        {
            "dialog": [
                utt("supporter", "Hello, how are you?", "Question"),  # no history: not a state
                utt("seeker", "Not great.\nI moved last month "),
                utt("supporter", shared, "Restatement or Paraphrasing"),
                utt("seeker", "yes"),
                utt("seeker", "and work is hard"),
                utt("supporter", "You have handled hard moves before.", "Affirmation and Reassurance"),
                utt("supporter", "Have you met anyone there?", "Question"),
                utt("supporter", "Bye", "Others"),
            ]
        },
        {"dialog": [utt("seeker", "My exam went badly."), utt("supporter", "Exams can be retaken.", "Information")]},
    ]
    src = tmp_path / "ESConv.json"
    src.write_text(json.dumps(convs))
    out = tmp_path / "other.tsv"
    assert conv.main([str(src), "--output", str(out)]) == [0, 1]
    raw = out.read_bytes().decode()
    assert raw.endswith("\r\n") and raw.count("\r\n") == 5
    lines = raw.split("\r\n")
    # a window of at most five utterances, the original spellings rewritten as the short files spell them
    assert (
        lines[3].startswith("0.0 0 3 yes EOS ")
        and lines[3].count(" EOS ") == 4
        and lines[3].endswith("1.0 1 7 [Other] Bye")
    )
    assert "[Questions] Hello, how are you?" in lines[0] and "Not great. I moved last month EOS" in lines[0]
    b = _bench()
    states = b.read_states(out)
    assert [s["label"] for s in states] == ["The Anchor", "The Beacon", "The Catalyst", "The Catalyst"]
    assert [s["conversation"].split("#")[1] for s in states] == ["0", "0", "0", "1"]
    assert states[1]["history"][-1] == ("0", "and work is hard")

    # --exclude leaves out a conversation whose long supporter turn is in that file
    dev = tmp_path / "dev.tsv"
    dev.write_text(_line(("0", 0, "Not great."), ("1", 1, f"[Restatement or Paraphrasing] {shared}")) + "\n")
    assert conv.main([str(src), "--exclude", str(dev), "--output", str(out)]) == [1]
    assert len(b.read_states(out)) == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="bad.json: not a list of conversations"):
        conv.main([str(bad), "--output", str(out)])
