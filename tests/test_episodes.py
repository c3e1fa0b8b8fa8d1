"`mascot episode` end to end on the shared samples with the embedded model, and kill/resume."

import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from mascot.core.store import read_jsonl
from mascot.core.records import validate_episode
from mascot.domain.personas import SUPPORT_ROSTER, MEETING_ROSTER


# the smoke config's token caps (the CLI's defaults are 64/80/64; a test's own flags, given after these, win): what these tests assert
# (record shape, rounds, Big Five, exactly-once after a kill) does not depend on reply length, and decoding is most of their time
SHORT = ("--director-max-tokens", "40", "--speaker-max-tokens", "32", "--user-max-tokens", "24")


def run_cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "mascot.domain.episodes", *SHORT, *args, "--no-progress"],
        capture_output=True,
        text=True,
        **kw,
    )


def summary_of(out: Path) -> dict:
    return json.loads(sorted((out.parent / (out.name + ".runs")).glob("*/run_summary.json"))[-1].read_text())


def test_esconv_four_conversations_big_five(shared_data_dir, tmp_path):
    r = run_cli(
        "--dataset",
        "ESConv",
        "--data-path",
        str(shared_data_dir / "esconv"),
        "--num-samples",
        "4",
        "--num-turns",
        "3",
        "--enable-user-simulation",
        "--enable-big-five",
        "--output-dir",
        str(tmp_path),
        "--trace-role-calls",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = Path(r.stdout.strip().splitlines()[-1])
    recs = list(read_jsonl(out))
    assert len(recs) == 4 and len({x["conv_id"] for x in recs}) == 4
    s = summary_of(out)
    assert s["status"] == "completed"
    directed = 0
    for rec in recs:
        validate_episode(rec)
        assert rec["metadata"]["persona_set"] == "big5" and rec["user_big_five"]
        agent_turns = [t for t in rec["turns"] if t.get("turn_type") != "user"]
        assert len(agent_turns) == 3
        # a round closes when the user replies: round ids never decrease, and rise by one right after each simulated user turn
        first = next(i for i, t in enumerate(rec["turns"]) if t.get("turn_type") != "user")
        rounds = [t["round_id"] for t in rec["turns"][first:]]
        assert rounds == sorted(rounds)
        for prev, nxt in zip(rec["turns"][first:], rec["turns"][first + 1 :]):
            assert nxt["round_id"] == prev["round_id"] + (prev.get("turn_type") == "user")
        assert set(rec["agents_spoken"]) <= set(SUPPORT_ROSTER.names)
        assert (
            rec["initial_emotion"] == rec["emotion_trajectory"][0]
            and rec["final_emotion"] == rec["emotion_trajectory"][-1]
        )
        directed += sum(t["directive_output"] is not None for t in agent_turns)
    # every directive was either parsed or counted as a fallback
    assert directed == 12 and s["num_random_agent_fallbacks"] == s["num_directive_parse_failures"] <= 12
    trace = [json.loads(l) for l in open(next(out.parent.glob(out.name + ".runs/*/role_call_trace.jsonl")))]
    assert {t["role"] for t in trace} >= {"director", "speaker", "user"}


def test_ed_and_qmsum_records(shared_data_dir, tmp_path):
    r = run_cli(
        "--dataset",
        "ED",
        "--data-path",
        str(shared_data_dir / "empathetic_dialogues"),
        "--split",
        "train",
        "--num-samples",
        "2",
        "--num-turns",
        "2",
        "--output-dir",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for rec in read_jsonl(Path(r.stdout.split()[-1])):
        validate_episode(rec)
        assert rec["metadata"]["valence"] in ("positive", "negative", "neutral")
    r = run_cli(
        "--dataset",
        "QMSum",
        "--data-path",
        str(shared_data_dir / "qmsum"),
        "--num-samples",
        "2",
        "--num-turns",
        "2",
        "--max-transcript-tokens",
        "300",
        "--output-dir",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for rec in read_jsonl(Path(r.stdout.split()[-1])):
        validate_episode(rec)
        assert (
            rec["metadata"]["domain"] in ("Academic", "Committee", "Product")
            and rec["meeting"]
            and isinstance(rec["start_idx"], int)
        )
        assert set(rec["agents_spoken"]) <= set(MEETING_ROSTER.names)


def test_sigkill_then_resume_writes_each_conversation_once(shared_data_dir, tmp_path):
    args = [
        "--dataset",
        "ESConv",
        "--data-path",
        str(shared_data_dir / "esconv"),
        "--split",
        "train",
        "--num-samples",
        "5",
        "--num-turns",
        "2",
        "--max-concurrency",
        "1",
        "--output-dir",
        str(tmp_path),
        "--output-name",
        "killed",
    ]
    out = tmp_path / "killed.jsonl"
    p = subprocess.Popen(
        [sys.executable, "-m", "mascot.domain.episodes", *SHORT, *args, "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not (out.exists() and out.read_text().count("\n") >= 2):
        time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    first = [json.loads(l)["conv_id"] for l in out.read_text().splitlines() if l.strip()]
    assert 2 <= len(first) < 5, "the kill should land part-way"
    with open(out, "a") as f:
        f.write('{"conv_id": "esconv_torn", "tur')  # and a torn line, as a kill mid-write leaves
    assert run_cli(*args).returncode != 0  # neither --resume nor --overwrite: refused
    r = run_cli(*args, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    ids = [x["conv_id"] for x in read_jsonl(out)]
    assert len(ids) == 5 and len(set(ids)) == 5 and ids[: len(first)] == first
    assert summary_of(out)["num_already_done"] == len(first)
    assert list(tmp_path.glob("killed.jsonl.torn-*"))


def test_remaining_baselines_run_on_real_contexts(shared_data_dir, tmp_path):
    "few-shot-cot, self-consistency and multiagent-esc (the systems the smoke pipeline leaves out) end to end on ESConv."
    for system in ("few-shot-cot", "self-consistency", "multiagent-esc"):
        r = run_cli(
            "--dataset",
            "ESConv",
            "--data-path",
            str(shared_data_dir / "esconv"),
            "--split",
            "test",
            "--num-samples",
            "1",
            "--num-turns",
            "1",
            "--system",
            system,
            "--speaker-max-tokens",
            "24",
            "--self-consistency-k",
            "2",
            "--output-dir",
            str(tmp_path),
        )
        assert r.returncode == 0, (system, r.stderr[-3000:])
        rec = next(read_jsonl(Path(r.stdout.split()[-1])))
        validate_episode(rec)
        assert (
            rec["metadata"]["system"] == system
            and rec["agents_spoken"] == {"Supporter": 1}
            and rec["metadata"]["director_model"] is None
        )
