"""Constrained decoding on the served path, against the project's fake OpenAI-compatible server: every director and judge request carries
its output constraint in vLLM's form (`structured_outputs`), built from the roster and rubric in use; a server that ignores it and answers
garbage gives counted violations, marked fallbacks and counted judge failures, and the runs still complete."""

import json
from pathlib import Path

from fake_openai_server import FakeOpenAIServer
from test_faults import EP, episode_args, judge_args, mascot, summaries, esconv  # noqa: F401 (esconv: the fixture)

from mascot.domain.personas import SUPPORT_ROSTER
from mascot.judging.rubrics import get_rubric, judgement_constraint

ROSTER_YAML = """name: pair
domain: support
personas:
  - {name: Sage, role: listener, contribution: calm validation}
  - {name: Spark, role: motivator, contribution: one small next step}
"""


def by_role(srv: FakeOpenAIServer, role: str) -> list[dict]:
    return [b for b, r in zip(srv.requests, srv.roles) if r == role]


def turns_of(path: Path) -> list[dict]:
    return [
        t for line in path.read_text().splitlines() for t in json.loads(line)["turns"] if t.get("turn_type") != "user"
    ]


def test_served_director_and_judge_requests_carry_the_constraint(esconv, tmp_path):
    roster = tmp_path / "pair.yaml"
    roster.write_text(ROSTER_YAML)
    with FakeOpenAIServer({}) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path / "custom", 2, 2, "--roster-path", roster))
        assert r.returncode == 0, r.stderr[-3000:]
        custom = by_role(srv, "director")
        r = mascot(*episode_args(srv.url, esconv, tmp_path / "default", 2, 2))
        assert r.returncode == 0, r.stderr[-3000:]
        support = by_role(srv, "director")[len(custom) :]
        r = mascot(*judge_args(srv.url, tmp_path / "default" / EP, tmp_path / "judged"))
        assert r.returncode == 0, r.stderr[-3000:]
        judge, free = by_role(srv, "judge"), by_role(srv, "speaker") + by_role(srv, "user")
    # the directive's schema names exactly the roster in use: the custom file's members, then the support roster's
    for bodies, names in ((custom, ["Sage", "Spark"]), (support, SUPPORT_ROSTER.names)):
        assert len(bodies) >= 4  # 2 conversations x 2 turns (a request timed out under load is asked again)
        for b in bodies:
            schema = b["structured_outputs"]["json"]
            assert schema["properties"]["agent_name"]["enum"] == names and schema["required"] == [
                "agent_name",
                "action",
                "tone",
            ]
    # each judge request carries its rubric's lines; speakers and the simulated user answer free text
    rubrics = {judgement_constraint(get_rubric(k, "ESConv")).regex for k in ("persona", "collective")}
    assert judge and {b["structured_outputs"]["regex"] for b in judge} == rubrics
    assert free and not any("structured_outputs" in b for b in free)
    # the fake server's answers conform: nothing counted, every directed turn marked constrained and parsed
    for run in (tmp_path / "default" / f"{EP}.runs", tmp_path / "judged" / f"judge_{Path(EP).stem}.runs"):
        assert summaries(run)[-1]["num_constraint_violations"] == 0
    assert all(
        t["directive_constrained"] and t["directive_source"] == "director" for t in turns_of(tmp_path / "default" / EP)
    )


def test_a_server_ignoring_the_constraint_gives_counted_violations_and_fallbacks(esconv, tmp_path):
    with FakeOpenAIServer({"garbage_directive": 1.0}) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 2, 2))
        assert r.returncode == 0, r.stderr[-3000:]
        # every persona judgement is garbage (the persona rubric asks whether a reply stays in character), the collective ones are not
        srv.faults, srv.fault_if = {"garbage_judge": 1.0}, "stay in character"
        r = mascot(*judge_args(srv.url, tmp_path / EP, tmp_path / "judged"))
        assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    turns = turns_of(tmp_path / EP)
    assert s["status"] == "completed" and len(turns) == 4
    assert s["num_constraint_violations"] == s["num_random_agent_fallbacks"] == s["num_directive_parse_failures"] == 4
    assert all(t["directive_source"] == "fallback" and t["directive_constrained"] for t in turns)
    j = summaries(tmp_path / "judged" / f"judge_{Path(EP).stem}.runs")[-1]
    assert j["status"] == "completed" and j["num_constraint_violations"] == j["num_annotation_failures"] > 0


def test_no_constrained_decoding_sends_free_requests(esconv, tmp_path):
    with FakeOpenAIServer({}) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 1, 1, "--no-constrained-decoding"))
        assert r.returncode == 0, r.stderr[-3000:]
    assert srv.requests and not any("structured_outputs" in b for b in srv.requests)
    assert all(t["directive_constrained"] is False for t in turns_of(tmp_path / EP))


def test_a_director_writing_a_persona_reply_is_a_counted_fallback(esconv, tmp_path):
    "A director that writes a persona's reply (`The Beacon: \"I'm so sorry...\"`) names no speaker to direct: a counted fallback."
    with FakeOpenAIServer({"reply_directive": 1.0}) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 1, 1))
        assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    (turn,) = turns_of(tmp_path / EP)
    assert turn["directive_source"] == "fallback" and turn["directive_output"].startswith("The Beacon: ")
    assert s["num_random_agent_fallbacks"] == s["num_directive_parse_failures"] == s["num_constraint_violations"] == 1
