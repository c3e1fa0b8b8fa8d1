"`mascot episode` end to end on the demo contexts with the embedded model, and kill/resume."

import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from mascot.core.store import read_jsonl
from mascot.core.records import validate_episode
from mascot.domain.personas import SUPPORT_ROSTER, MEETING_ROSTER


# the smoke config's token caps (the CLI's defaults are 64/80/64; a test's own flags, given after these, win): what these tests assert
# (record shape, rounds, Big Five, exactly-once after a kill) does not depend on reply length, and decoding is most of their time
SHORT = ("--director-max-tokens", "40", "--speaker-max-tokens", "32", "--user-max-tokens", "24")
# nor on what the model says: the tiny random model (with the real tokenizer) stands in for the embedded one, as in test-fast; every
# role still goes through the embedded backend, the prompts, the output constraint and the records (the smoke run in test_served and
# test_site runs every stage on the embedded model itself)
TINY_ENV = {**os.environ, "MASCOT_TINY_MODEL": "1"}


def run_cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "mascot.domain.episodes", *SHORT, *args, "--no-progress"],
        capture_output=True,
        text=True,
        env=TINY_ENV,
        **kw,
    )


def summary_of(out: Path) -> dict:
    return json.loads(sorted((out.parent / (out.name + ".runs")).glob("*/run_summary.json"))[-1].read_text())


@pytest.mark.integration
def test_esconv_four_conversations_big_five(data_dir, tmp_path):
    r = run_cli(
        "--dataset",
        "ESConv",
        "--data-path",
        str(data_dir / "esconv"),
        "--split",
        "train",
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
        agent_turns = [t for t in rec["turns"] if t.get("turn_type") != "user"]
        first = next(i for i, t in enumerate(rec["turns"]) if t.get("turn_type") != "user")
        user_spoke = any(t.get("turn_type") == "user" for t in rec["turns"][first:])
        # the profile is recorded exactly when a simulated user with it spoke
        assert (rec["metadata"]["persona_set"] == "big5") == user_spoke == bool(rec["user_big_five"])
        assert len(agent_turns) == 3
        # a round is one director -> speaker (-> user) cycle: each agent turn opens the next round, a user reply shares its agent's round
        first = next(i for i, t in enumerate(rec["turns"]) if t.get("turn_type") != "user")
        rounds = [t["round_id"] for t in rec["turns"][first:]]
        assert rounds == sorted(rounds)
        for prev, nxt in zip(rec["turns"][first:], rec["turns"][first + 1 :]):
            assert nxt["round_id"] == prev["round_id"] + (nxt.get("turn_type") != "user")
        for (
            t
        ) in agent_turns:  # every agent turn says whether its directive came from the director or the random fallback
            assert (t["directive_parsed"], t["directive_source"]) in ((True, "director"), (False, "fallback"))
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


@pytest.mark.integration
def test_ed_and_qmsum_records(data_dir, tmp_path):
    r = run_cli(
        "--dataset",
        "ED",
        "--data-path",
        str(data_dir / "empathetic_dialogues"),
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
        str(data_dir / "qmsum"),
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


@pytest.mark.integration
def test_sigkill_then_resume_writes_each_conversation_once(data_dir, tmp_path):
    args = [
        "--dataset",
        "ESConv",
        "--data-path",
        str(data_dir / "esconv"),
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
        env=TINY_ENV,
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


@pytest.mark.integration
def test_remaining_baselines_run_on_real_contexts(data_dir, tmp_path):
    "few-shot-cot, self-consistency and multiagent-esc (the systems the smoke pipeline leaves out) end to end on ESConv."
    for system in ("few-shot-cot", "self-consistency", "multiagent-esc"):
        r = run_cli(
            "--dataset",
            "ESConv",
            "--data-path",
            str(data_dir / "esconv"),
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


# ---------------------------------------------------------------- records that say what happened (against the fake server)
def _fake_episodes(url, data, out, *extra, n=3, turns=3):
    from mascot.domain.episodes import EpisodeConfig, run_episodes

    kw = dict(
        vllm_server_url=url,
        model_name="fake-model",
        dataset="ESConv",
        data_path=str(data / "esconv"),
        num_samples=n,
        num_turns=turns,
        output_dir=str(out),
        progress=False,
        max_retries=0,
    )
    for k, v in extra:
        kw[k] = v
    return list(read_jsonl(run_episodes(EpisodeConfig(**kw))))


@pytest.mark.served
def test_garbage_directives_are_recorded_as_fallbacks(data_dir, tmp_path):
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer({"garbage_directive": 0.5}, seed=3) as srv:
        recs = _fake_episodes(srv.url, data_dir, tmp_path)
    agent = [t for r in recs for t in r["turns"] if t.get("turn_type") != "user"]
    fallbacks = [t for t in agent if t["directive_output"].startswith("banana")]
    assert 0 < len(fallbacks) < len(agent)
    assert all(t["directive_parsed"] is False and t["directive_source"] == "fallback" for t in fallbacks)
    assert all(
        t["directive_parsed"] is True and t["directive_source"] == "director" for t in agent if t not in fallbacks
    )
    for r in recs:
        validate_episode(r)


@pytest.mark.served
def test_rounds_big_five_and_untrained_without_user_simulation(data_dir, tmp_path):
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        quiet = _fake_episodes(srv.url, data_dir, tmp_path / "q", ("enable_big_five", True), ("share_model", True))
        spoke = _fake_episodes(
            srv.url,
            data_dir,
            tmp_path / "s",
            ("enable_big_five", True),
            ("enable_user_simulation", True),
            ("user_response_probability", 1.0),
        )
    for r in quiet:
        # without user simulation every director step is its own round, and a profile no simulated user spoke with is not recorded
        assert [t["round_id"] for t in r["turns"] if t.get("turn_type") != "user"] == [0, 1, 2]
        assert r["user_big_five"] is None and r["metadata"]["persona_set"] == "default"
        # base models in every role (--share-model) are never tagged as the trained system
        assert r["metadata"]["system"] == "untrained"
    for r in spoke:
        assert r["user_big_five"] and r["metadata"]["persona_set"] == "big5" and r["metadata"]["system"] == "mascot"


@pytest.mark.served
def test_qmsum_big_five_is_recorded_when_the_participant_spoke(data_dir, tmp_path):
    from fake_openai_server import FakeOpenAIServer
    from mascot.domain.episodes import EpisodeConfig, run_episodes

    with FakeOpenAIServer() as srv:
        cfg = EpisodeConfig(
            vllm_server_url=srv.url,
            model_name="fake-model",
            dataset="QMSum",
            data_path=str(data_dir / "qmsum"),
            num_samples=1,
            num_turns=2,
            max_transcript_tokens=300,
            enable_user_simulation=True,
            user_response_probability=1.0,
            enable_big_five=True,
            user_big_five_profile="High Openness",
            output_dir=str(tmp_path),
            progress=False,
        )
        rec = next(read_jsonl(run_episodes(cfg)))
    validate_episode(rec)
    assert rec["user_big_five"] == "High Openness" and rec["metadata"]["persona_set"] == "big5"


# ---------------------------------------------------------------- common random numbers
TWO_SPELLINGS = (  # two directors' raw outputs that pick the same speaker, action and tone
    '{"agent_name": "The Catalyst", "action": "ask one question", "tone": "warm"}',
    'I pick:\n{"tone": "warm", "agent_name": "the catalyst", "action": "ask one question"}',
)


def _rollouts(runner, state_dict, texts, seed="g0", horizon=2):
    import asyncio
    from mascot.domain.prompts import parse_directive
    from mascot.domain.rollouts import state_from_dict, roll_forward

    async def one(text):
        st = state_from_dict(state_dict, runner.roster, seed=seed)
        _, end = await roll_forward(runner, st, parse_directive(text, runner.roster), text, horizon, 4)
        return [(t.agent_name, t.response, t.turn_type, t.round_id) for t in end.turns]

    async def all_():
        return await asyncio.gather(*[one(t) for t in texts])

    return asyncio.run(all_())


def _state(data_dir):
    from mascot.core.records import Turn
    from mascot.domain.dataset_loading import load_contexts

    ctx = load_contexts("ESConv", split="train", data_path=str(data_dir / "esconv"), num_samples=1)[0]
    opening = [
        Turn(0, 0, SUPPORT_ROSTER.user_label, "I lost my job and I do not know what to do.", turn_type="user").to_dict()
    ]
    return {"context": ctx.to_dict(), "turns": opening, "round_id": 0, "emotion_trajectory": ["sad"], "big_five": None}


def _runner(cfg):
    from mascot.domain.episodes import EpisodeRunner
    from mascot.llm.client import LLMClient

    return EpisodeRunner(cfg, LLMClient(cfg))


def test_same_choice_same_rollout_embedded(data_dir, monkeypatch):
    "Two directors that pick the same speaker at a state get byte-identical rollouts: batched together, alone, and on another batch mate."
    from mascot.domain.episodes import EpisodeConfig

    # in fp32 a row's numbers move by at most ~1e-5 with its batch mates; in bf16 a prompt alone and the same prompt sharing a cached
    # prefix differ by up to 0.12 in a token's log-probability (README, Reproducibility), enough to flip a sample
    monkeypatch.setenv("MASCOT_EMBEDDED_DTYPE", "float32")

    cfg = EpisodeConfig(
        dataset="ESConv",
        enable_user_simulation=True,
        user_response_probability=0.5,
        speaker_temperature=1.0,
        user_temperature=1.0,
        speaker_max_tokens=12,
        user_max_tokens=10,
        director_max_tokens=16,
        progress=False,
    )
    runner, st = _runner(cfg), _state(data_dir)
    together = _rollouts(runner, st, TWO_SPELLINGS)
    assert together[0] == together[1]
    alone = _rollouts(runner, st, TWO_SPELLINGS[:1])
    assert alone[0] == together[0]  # the same samples whatever they were batched with
    other = _rollouts(runner, st, TWO_SPELLINGS[:1], seed="g1")
    assert other[0] != together[0]  # another group seed draws other numbers


@pytest.mark.served
def test_same_choice_same_rollout_served(data_dir):
    "The same against an OpenAI-compatible server: the requests of the two rollouts carry equal seeds, and every request carries one."
    from fake_openai_server import FakeOpenAIServer
    from mascot.domain.episodes import EpisodeConfig

    with FakeOpenAIServer() as srv:
        cfg = EpisodeConfig(
            vllm_server_url=srv.url,
            model_name="fake-model",
            dataset="ESConv",
            enable_user_simulation=True,
            user_response_probability=0.5,
            max_retries=0,
            progress=False,
        )
        st = _state(data_dir)
        a = _rollouts(_runner(cfg), st, TWO_SPELLINGS[:1])  # a client per event loop
        first = list(srv.requests)
        b = _rollouts(_runner(cfg), st, TWO_SPELLINGS[1:])
        second = srv.requests[len(first) :]
    assert a == b
    assert [r.get("seed") for r in first] == [r.get("seed") for r in second]
    assert first and all(isinstance(r.get("seed"), int) for r in first)
