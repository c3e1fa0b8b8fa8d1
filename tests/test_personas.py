"Director parsing and roster YAML errors: the two places where model output and user files meet `mascot.domain.personas`."

import pytest, yaml
from mascot.core.records import Directive
from mascot.domain.personas import SUPPORT_ROSTER, MEETING_ROSTER, RosterError, load_roster, roster_for_dataset
from mascot.domain.prompts import parse_directive, parse_user_reply


@pytest.mark.parametrize(
    "text, want",
    [
        (
            '{"agent_name": "The Anchor", "action": "validate", "tone": "warm"}',
            Directive("The Anchor", "validate", "warm"),
        ),
        (
            "```json\n{'SPEAKER': 'catalyst', 'action': 'ask a question',}\n```",
            Directive("The Catalyst", "ask a question", "curious, practical"),
        ),
        (
            "Next:\nagent_name: The Beacon.\naction: name a strength",
            Directive("The Beacon", "name a strength", "encouraging, hopeful"),
        ),
        ('{"agent_name": "The Therapist", "action": "diagnose"}', None),
        ('{"action": "ask The Anchor to help"}', None),
        ("Nobody in particular.", None),
        ("", None),
    ],
)
def test_parse_directive(text, want):
    assert parse_directive(text, SUPPORT_ROSTER) == want


def test_parse_directive_meeting_synonym_key():
    assert (
        parse_directive('{"agent": "critic", "action": "probe risks", "tone": "direct"}', MEETING_ROSTER).agent_name
        == "Critic"
    )


def test_parse_user_reply_strips_emotion():
    assert parse_user_reply("Okay, I'll try.\n**Emotion:** Hopeful.") == ("Okay, I'll try.", "hopeful")


def test_roster_for_dataset():
    assert roster_for_dataset("ed") is SUPPORT_ROSTER and roster_for_dataset("QMSUM") is MEETING_ROSTER
    with pytest.raises(ValueError, match="ESConv"):
        roster_for_dataset("mmlu")


def test_load_roster_round_trip(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(MEETING_ROSTER.to_dict()))
    assert load_roster(p) == MEETING_ROSTER


@pytest.mark.parametrize(
    "text, msg",
    [
        ("name: r\ndomain: support\npersonas: []\n", r"r.yaml: field 'personas' should be a non-empty list"),
        (
            "name: r\ndomain: support\npersonas:\n  - {name: A, role: x}\n",
            r"r.yaml: personas\[0\]: missing field 'contribution'",
        ),
        (
            "name: r\ndomain: support\npersonas:\n  - {name: A, role: x, contribution: y}\n  - {name: a, role: x, contribution: y}\n",
            r"personas\[1\] name 'a' clashes with personas\[0\] 'A'",
        ),
        (
            "name: r\ndomain: support\npersonas:\n  - {name: A, role: x, contribution: y, behaviors: [z]}\n",
            r"did you mean 'behaviours'",
        ),
        ("name: r\ndomian: support\npersonas: []\n", r"unknown field 'domian' \(did you mean 'domain'\?\)"),
    ],
)
def test_load_roster_errors(tmp_path, text, msg):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    with pytest.raises(RosterError, match=msg):
        load_roster(p)


def test_persona_names_in_any_script(tmp_path):
    "Letters of every script are kept: 'Анна', '李雷' and 'Zoë' are distinct members the director can name (case-folded, NFKC-normalised)."
    path = tmp_path / "intl.yaml"
    personas = [{"name": n, "role": "listener", "contribution": "listening"} for n in ("Анна", "李雷", "Zoë", "Zoe")]
    path.write_text(yaml.safe_dump({"name": "intl", "domain": "support", "personas": personas}, allow_unicode=True))
    roster = load_roster(path)
    assert [roster.find(q).name for q in ("анна", "АННА.", "李雷", "zoe\u0308", "ZOË", "Zoe")] == [
        "Анна",
        "Анна",
        "李雷",
        "Zoë",
        "Zoë",
        "Zoe",
    ]
    d = parse_directive('{"agent_name": "李雷", "action": "listen", "tone": "warm"}', roster)
    assert d == Directive("李雷", "listen", "warm")
    assert parse_directive("Анна should speak next.", roster).agent_name == "Анна"


def test_roster_errors_are_one_line_from_the_cli(tmp_path, data_dir):
    "A roster whose names clash (here in Cyrillic, which used to normalise to nothing) stops the command with one line and exit code 2."
    import subprocess, sys

    path = tmp_path / "clash.yaml"
    personas = [{"name": n, "role": "r", "contribution": "c"} for n in ("Анна", "анна")]
    path.write_text(yaml.safe_dump({"name": "x", "domain": "support", "personas": personas}, allow_unicode=True))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mascot.cli",
            "episode",
            "--roster-path",
            str(path),
            "--output-dir",
            str(tmp_path / "o"),
        ]
        + ["--num-samples", "1", "--data-path", str(data_dir / "esconv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and "clashes" in r.stderr and str(path) in r.stderr
