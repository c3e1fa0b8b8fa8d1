"""bench/director_strategy.py: its reading of an ESConv strategy file, its metrics, the GRPO states, and a run of the references with a
failing trained method and a resume, on small files in the authors' format made here (no model is loaded)."""

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

    # the tf-idf reference's fields: the last seeker turn, the last supporter turn, the window, who spoke last
    assert states[1]["fields"] == {
        "seeker": "I feel so alone since the move.",
        "supporter": "That sounds lonely.",
        "window": "I feel so alone since the move. That sounds lonely.",
    }
    assert (
        states[1]["last_speaker"] == "1" and states[3]["last_speaker"] == "0" and states[2]["fields"]["supporter"] == ""
    )

    labels = [s["label"] for s in states]
    assert b.balanced_accuracy(labels, ["The Catalyst"] * 4)["balanced_accuracy"] == pytest.approx(1 / 3, abs=1e-4)
    boot = b.Bootstrap(states, n_boot=200)
    assert b.summary_of(boot.curve([labels])) == {"mean": 1.0, "ci95": [1.0, 1.0]}
    assert b.summary_of(boot.curve([["The Catalyst"] * 4]))["mean"] == pytest.approx(1 / 3, abs=1e-4)
    # on the sample itself the bootstrap's metrics are sklearn's: macro-F1 over the personas in the labels or the predictions
    from sklearn.metrics import f1_score

    for preds in (["The Catalyst"] * 4, ["The Anchor", "The Beacon", "The Beacon", "The Catalyst"]):
        got = b.scores(labels, preds)
        assert boot.curve([preds], "macro_f1")[-1] == pytest.approx(f1_score(labels, preds, average="macro"))
        assert got["macro_f1"] == round(f1_score(labels, preds, average="macro"), 4)
        assert boot.curve([preds])[-1] == pytest.approx(got["balanced_accuracy"], abs=1e-4)
    assert b.scores(labels, ["The Catalyst"] * 4)["picks"] == {"The Anchor": 0, "The Catalyst": 4, "The Beacon": 0}

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


def _file(path: Path, n_conv: int = 20) -> Path:
    "n_conv conversations of four states each, the strategies cycling, the words repeating (enough for the tf-idf reference)."
    strategies = [
        "Questions",
        "Reflection of feelings",
        "Providing Suggestions",
        "Affirmation and Reassurance",
        "Information",
    ]
    lines, k = [], 0
    for c in range(n_conv):
        hist = [("0", 0, f"I worry about my job and my family {c % 3}")]
        for i in range(1, 5):
            st = strategies[k % len(strategies)]
            k += 1
            lines.append(_line(*hist, ("1", 2 * i - 1, f"[{st}] words about {st.lower()} {c % 4}")))
            hist += [("1", 2 * i - 1, f"[{st}] words about {st.lower()} {c % 4}"), ("0", 2 * i, f"yes the work {i}")]
    path.write_text("\r\n".join(lines) + "\r\n")
    return path


def test_references_records_failures_and_resume(tmp_path, monkeypatch):
    """The run on a small file with no model: every reference scored on every validation and test state, a trained method that fails
    recorded as a failure (GRPO without its seed's SFT adapter too), the summary with its bootstrap intervals, and a second run resumes."""
    b = _bench()
    f = _file(tmp_path / "dev.tsv")

    def broken(*a, **k):
        raise RuntimeError("no trainer here")

    monkeypatch.setattr(b, "train_sft", broken)
    out, work = tmp_path / "out.json", tmp_path / "work"
    methods = ["constant_anchor", "constant_catalyst", "random", "position", "tfidf", "sft", "grpo"]
    argv = [
        "--train-path",
        str(f),
        "--output",
        str(out),
        "--work-dir",
        str(work),
        "--threads",
        "1",
        "--seeds",
        "0",
        "1",
    ]
    b.main([*argv, "--methods", *methods])
    res = json.loads(out.read_text())
    n = res["protocol"]["n_states"]
    assert (n["train"], n["validation"], n["test"]) == (48, 8, 24)  # 12 / 2 / 6 conversations, every state scored
    got = {(r["method"], r["seed"]): r for r in res["results"]}
    assert len(got) == 14
    assert got[("sft", 0)]["failed"] == "RuntimeError: no trainer here"
    assert "no SFT adapter of seed 1" in got[("grpo", 1)]["failed"]
    assert res["summary"]["sft"] == {"n_seeds": 0, "n_failed": 2}
    tf = got[("tfidf", 0)]
    assert sum(tf["picks"].values()) == 24 and sum(tf["validation"]["picks"].values()) == 8
    assert tf["C_chosen_on_validation"] in b.C_GRID and set(tf["validation_curve"]) == {str(c) for c in b.C_GRID}
    s = res["summary"]["tfidf"]
    for k in ("balanced_accuracy", "macro_f1"):
        assert s[k]["ci95"][0] <= s[k]["mean"] <= s[k]["ci95"][1]
    assert s["macro_f1"]["mean"] == tf["macro_f1"]  # the same predictions for every seed
    assert res["summary"]["best_constant"] == "constant_catalyst" and "tfidf" in res["timing"]["per_method"]
    b.main([*argv, "--methods", *methods])  # everything recorded: nothing run again
    assert json.loads(out.read_text())["timing"]["this_invocation"]["records_resumed"] == 14


def test_grpo_states_read_back_as_episode_states():
    "The branching rows the GRPO trainer reads: each state's window as an episode state (seeker turns the user's, supporter turns 'Supporter')."
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.domain.rollouts import state_from_dict

    b = _bench()
    s = {"id": "dev.tsv:7", "history": [("0", "I lost my job."), ("1", "That is hard."), ("0", "Yes.")]}
    st = state_from_dict(b.episode_state(s), SUPPORT_ROSTER)
    assert st.context.context_id == "dev.tsv:7"
    assert [(t.agent_name, t.turn_type, t.response) for t in st.turns] == [
        (SUPPORT_ROSTER.user_label, "user", "I lost my job."),
        ("Supporter", "agent", "That is hard."),
        (SUPPORT_ROSTER.user_label, "user", "Yes."),
    ]
