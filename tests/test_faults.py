"""Runs that survive faults: `mascot episode`, `generate` and `judge` against the project's fake OpenAI-compatible server with seeded
faults (5xx, slow and dripping bodies, malformed JSON, empty content, no choices, garbage directives, an outage), in tolerant and strict
mode; and bad input, which must give one line naming the file, field or flag and leave earlier output intact.

Every run is bounded by a subprocess timeout far below what the unfixed code took (a dripping body held a call > 150 s)."""

import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest

from fake_openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = int(
    os.environ.get("MASCOT_FAULT_BOUND_S", 90)
)  # the wall-time bound of every run here: each takes seconds; the unfixed code hung for ever in several cases
COUNTER_KEYS = (
    "num_generation_failures",
    "num_directive_parse_failures",
    "num_random_agent_fallbacks",
    "num_empty_responses",
    "num_annotation_failures",
    "num_skipped_samples",
)


def mascot(*args, timeout=BOUND_S, env=None):
    env = {
        **{k: v for k, v in os.environ.items() if k != "MASCOT_DEBUG"},
        "PYTHONPATH": str(ROOT),
        "OMP_WAIT_POLICY": "PASSIVE",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "mascot.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def esconv(data_dir, tmp_path_factory):
    "A private copy of the demo ESConv file (the tests never write inside the package)."
    d = tmp_path_factory.mktemp("data") / "esconv"
    shutil.copytree(data_dir / "esconv", d)
    return d


def episode_args(url, data, out, n=8, turns=2, *extra):
    return [
        "episode",
        "--vllm-server-url",
        url,
        "--model-name",
        "fake-model",
        "--dataset",
        "ESConv",
        "--split",
        "train",
        "--data-path",
        data,
        "--num-turns",
        turns,
        "--num-samples",
        n,
        "--enable-user-simulation",
        "--user-response-probability",
        "1",
        "--output-dir",
        out,
        "--no-progress",
        "--max-retries",
        "2",
        "--request-timeout",
        "2",
        *extra,
    ]


def summaries(runs_root: Path) -> list[dict]:
    "The run summaries under a `.runs` folder, oldest first."
    return [
        json.loads(p.read_text())
        for p in sorted(runs_root.glob("*/run_summary.json"), key=lambda p: p.stat().st_mtime_ns)
    ]


def records(path: Path, key="conv_id") -> list[str]:
    return [json.loads(l)[key] for l in path.read_text().splitlines() if l.strip()]


def one_line_error(r, *needles):
    "Exit 2 and exactly one line on stderr, holding every needle."
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


EP = "mascot_ESConv_train.jsonl"


# ---------------------------------------------------------------- tolerant mode tolerates, strict mode stops
def test_episode_tolerant_counts_failed_items_and_resume_completes_exactly_once(esconv, tmp_path):
    with FakeOpenAIServer({"error_500": 0.45, "malformed": 0.1, "no_choices": 0.05}, seed=3) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 11))  # the demo ESConv file's whole train split
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert s["status"] == "completed"
    assert s["num_generation_failures"] > 0  # some episodes still failed after their retries: counted, not fatal
    assert (
        s["num_written"] + s["num_generation_failures"] == s["num_requested"] == 11
    )  # every requested item written or counted
    assert s["num_skipped_samples"] == s["num_generation_failures"]
    ids = records(tmp_path / EP)
    assert len(ids) == len(set(ids)) == s["num_written"]
    assert (
        all(e.startswith(f"{e.split(':')[0]}:") for e in s["errors"])
        and len(s["errors"]) == s["num_generation_failures"]
    )
    with FakeOpenAIServer({}, seed=3) as srv:  # the server recovers: --resume does only what is missing
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 11, 2, "--resume"))
    assert r.returncode == 0, r.stderr[-3000:]
    s2 = summaries(tmp_path / f"{EP}.runs")[-1]
    assert (s2["num_requested"], s2["num_written"], s2["num_generation_failures"]) == (
        s["num_generation_failures"],
        s["num_generation_failures"],
        0,
    )
    ids = records(tmp_path / EP)
    assert len(ids) == len(set(ids)) == 11
    for line in (tmp_path / EP).read_text().splitlines():  # every record has the turns it was asked for
        rec = json.loads(line)
        assert sum(t.get("turn_type") != "user" for t in rec["turns"]) == 2 and all(t["response"] for t in rec["turns"])


def test_episode_strict_stops_at_first_failure_with_one_line(esconv, tmp_path):
    with FakeOpenAIServer({"error_500": 1.0}, roles=("speaker",)) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 4, 2, "--strict", "--max-retries", "1"))
    line = one_line_error(r, "mascot episode: --strict: num_generation_failures at ", "kept failing after 1 retries")
    assert "500" in line
    assert summaries(tmp_path / f"{EP}.runs")[-1]["status"] == "failed"


def test_empty_user_replies_are_retried_once_then_counted_and_strict_stops(esconv, tmp_path):
    with FakeOpenAIServer({"empty": 1.0}, roles=("user",)) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path / "t", 2, 2))
        user_calls = sum(v for (role, _), v in srv.stats.items() if role == "user")
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / "t" / f"{EP}.runs")[-1]
    user_turns = s["num_empty_responses"]
    assert user_turns == 4  # 2 episodes x 2 rounds, each user reply empty: counted
    assert user_calls == 2 * user_turns and s["roles"]["user"]["calls"] == user_calls  # each asked twice
    with FakeOpenAIServer({"empty": 1.0}, roles=("user",)) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path / "s", 2, 2, "--strict"))
    one_line_error(r, "--strict: num_empty_responses simulated user")


def test_empty_speaker_reply_retried_and_garbage_directives_counted(esconv, tmp_path):
    with FakeOpenAIServer({"empty": 0.5, "garbage_directive": 0.5}, seed=5) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 6, 3))
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert (
        s["num_directive_parse_failures"] > 0 and s["num_random_agent_fallbacks"] == s["num_directive_parse_failures"]
    )
    assert s["num_written"] == 6 and s["num_generation_failures"] == 0
    recs = [json.loads(l) for l in (tmp_path / EP).read_text().splitlines()]
    empty = sum(not t["response"] for rec in recs for t in rec["turns"])
    assert empty == s["num_empty_responses"]  # every empty turn written is counted, and only those


def test_outage_longer_than_retries_is_counted_not_fatal(esconv, tmp_path):
    with FakeOpenAIServer(
        {}, outage=(6, 2.0)
    ) as srv:  # after the first episode, 2 s of dropped connections; each call gives up in ~0.5 s
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 8, 2, "--max-retries", "1", "--max-concurrency", "1"))
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert s["status"] == "completed" and 0 < s["num_generation_failures"] < 8
    assert (
        s["num_written"] + s["num_generation_failures"]
        == 8
        == len(records(tmp_path / EP)) + s["num_generation_failures"]
    )
    assert any("unreachable" in e for e in s["errors"])


# ---------------------------------------------------------------- bounded time
def test_dripping_body_is_cut_at_the_request_deadline(esconv, tmp_path):
    "A server sending its body one byte per 0.3 s: --request-timeout bounds the whole request, not each read."
    with FakeOpenAIServer({"drip": 1.0}, roles=("speaker",), drip_s=0.3) as srv:
        t0 = time.time()
        r = mascot(
            *episode_args(srv.url, esconv, tmp_path, 1, 1, "--request-timeout", "1", "--max-retries", "1"), timeout=60
        )
        wall = time.time() - t0
    # the one episode asked for failed, so the run wrote nothing: a failure, with the reason counted
    assert r.returncode == 2 and "0 of 1" in r.stderr.strip().splitlines()[-1], r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert s["status"] == "failed"
    assert s["num_generation_failures"] == 1 and "no complete reply within --request-timeout 1 s" in s["errors"][0]
    assert wall < 60  # (the subprocess timeout is the real bound; without the deadline this call ran for minutes)


def test_slow_server_times_out_per_request(esconv, tmp_path):
    with FakeOpenAIServer({"slow": 1.0}, roles=("director",), slow_s=4) as srv:
        r = mascot(
            *episode_args(
                srv.url, esconv, tmp_path, 2, 1, "--request-timeout", "0.5", "--max-retries", "0", "--strict"
            ),
            timeout=60,
        )
    one_line_error(
        r,
        "--strict: num_generation_failures at",
        "unreachable after 0 retries: no complete reply within --request-timeout 0.5 s",
    )


@pytest.mark.parametrize(
    "flag,value,needle",
    [
        ("--max-concurrency", "0", "--max-concurrency must be >= 1 (got 0)"),
        ("--request-timeout", "-1", "--request-timeout must be > 0 seconds (got -1.0)"),
        ("--num-turns", "-2", "--num-turns must be >= 1 (got -2)"),
        ("--user-response-probability", "1.5", "--user-response-probability must be within [0, 1]"),
    ],
)
def test_numeric_flags_refused_naming_the_flag(esconv, tmp_path, flag, value, needle):
    r = mascot(*episode_args("http://127.0.0.1:9/v1", esconv, tmp_path, 1, 1, flag, value), timeout=30)
    one_line_error(r, "mascot episode: ", needle)
    assert not any(tmp_path.iterdir())  # refused before any output


# ---------------------------------------------------------------- --overwrite never loses data; --resume checks its inputs
def test_overwrite_keeps_old_output_when_the_start_fails(esconv, tmp_path):
    with FakeOpenAIServer({}) as srv:
        assert mascot(*episode_args(srv.url, esconv, tmp_path, 3, 1)).returncode == 0
        before = (tmp_path / EP).read_bytes()
        bad_runs = [
            (episode_args(srv.url, tmp_path / "nope", tmp_path, 3, 1, "--overwrite"), ["nope"]),  # data path typo
            (
                episode_args("http://127.0.0.1:9/v1", esconv, tmp_path, 3, 1, "--overwrite", "--max-retries", "0"),
                ["127.0.0.1:9/v1 unreachable"],
            ),
            (
                episode_args(srv.url, esconv, tmp_path, 3, 1, "--overwrite", "--directive-model", "no-such-model"),
                ["role director", "'no-such-model'"],
            ),
            (
                episode_args(srv.url, esconv, tmp_path, 3, 1, "--overwrite", "--system", "mascott"),
                ["--system 'mascott'"],
            ),
        ]
        for args, needles in bad_runs:
            one_line_error(mascot(*args), *needles)
            assert (tmp_path / EP).read_bytes() == before
        # a good --overwrite replaces it, under its own settings
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 2, 2, "--overwrite"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(records(tmp_path / EP)) == 2
    assert json.loads((tmp_path / f"{EP}.runs" / "fingerprint.json").read_text())["num_turns"] == 2


def test_resume_under_other_settings_is_refused_listing_changes(esconv, tmp_path):
    with FakeOpenAIServer({}) as srv:
        assert mascot(*episode_args(srv.url, esconv, tmp_path, 3, 2)).returncode == 0
        before = (tmp_path / EP).read_bytes()
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 4, 3, "--resume", "--seed", "7"))
        one_line_error(r, "--resume:", EP, "num_turns: 2 -> 3", "seed: 0 -> 7")
        assert (tmp_path / EP).read_bytes() == before
        # a larger --num-samples or another server is not a different record: the resume continues
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 4, 2, "--resume", "--max-concurrency", "3"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(set(records(tmp_path / EP))) == 4


def test_existing_output_and_corrupt_record_are_one_line(esconv, tmp_path):
    with FakeOpenAIServer({}) as srv:
        assert mascot(*episode_args(srv.url, esconv, tmp_path, 2, 1)).returncode == 0
        one_line_error(
            mascot(*episode_args(srv.url, esconv, tmp_path, 2, 1)), "already exists", "--resume", "--overwrite"
        )
        lines = (tmp_path / EP).read_text().splitlines()
        (tmp_path / EP).write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
        one_line_error(mascot(*episode_args(srv.url, esconv, tmp_path, 2, 1, "--resume")), f"{EP}:2: not valid JSON")


# ---------------------------------------------------------------- status is true
def test_sigterm_marks_interrupted_and_sigkill_is_marked_by_the_next_resume(esconv, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
    with FakeOpenAIServer({"slow": 1.0}, slow_s=1.5) as srv:
        args = [
            sys.executable,
            "-m",
            "mascot.cli",
            *map(
                str, episode_args(srv.url, esconv, tmp_path, 6, 2, "--max-concurrency", "1", "--request-timeout", "10")
            ),
        ]
        runs = tmp_path / f"{EP}.runs"
        count = lambda: len(list(runs.glob("*/run_summary.json")))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            n_before = count()
            p = subprocess.Popen(
                args + (["--resume"] if sig == signal.SIGKILL else []),
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.time() + 30
            while time.time() < deadline and count() <= n_before:
                time.sleep(0.2)
            time.sleep(1.0)  # mid-run
            p.send_signal(sig)
            out, err = p.communicate(timeout=30)
            if sig == signal.SIGTERM:
                assert p.returncode == 128 + signal.SIGTERM, err[-3000:]
                assert (
                    err.strip().splitlines() == [err.strip()] and "interrupted by SIGTERM" in err and "--resume" in err
                )
                assert summaries(tmp_path / f"{EP}.runs")[-1]["status"] == "interrupted"
            else:
                assert (
                    summaries(tmp_path / f"{EP}.runs")[-1]["status"] == "running"
                )  # SIGKILL leaves no chance to say otherwise
        srv.faults = {}
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 6, 2, "--resume"))
    assert r.returncode == 0, r.stderr[-3000:]
    st = [s["status"] for s in summaries(tmp_path / f"{EP}.runs")]
    assert st == ["interrupted", "interrupted", "completed"], st
    ids = records(tmp_path / EP)
    assert len(ids) == len(set(ids)) == 6


# ---------------------------------------------------------------- generate and judge
def generate_args(url, data, out, *extra):
    return [
        "generate",
        "--vllm-server-url",
        url,
        "--judge-server-url",
        url,
        "--judge",
        "fake-model",
        "--model-name",
        "fake-model",
        "--dataset",
        "ESConv",
        "--split",
        "train",
        "--data-path",
        data,
        "--num-samples",
        "3",
        "--num-candidates",
        "3",
        "--output-dir",
        out,
        "--no-progress",
        "--max-retries",
        "1",
        "--request-timeout",
        "2",
        *extra,
    ]


def test_generate_tolerant_counts_judge_failures_and_strict_stops_on_empty_candidates(esconv, tmp_path):
    with FakeOpenAIServer({"error_500": 0.5, "malformed": 0.2}, roles=("judge",), seed=2) as srv:
        r = mascot(*generate_args(srv.url, esconv, tmp_path / "t"))
    assert r.returncode == 0, r.stderr[-3000:]
    folder = tmp_path / "t" / "individual_ESConv_fake-model"
    s = summaries(folder / "runs")[-1]
    assert s["status"] == "completed" and s["num_annotation_failures"] > 0 and s["num_generation_failures"] == 0
    recs = [json.loads(l) for l in (folder / "candidates.jsonl").read_text().splitlines()]
    assert len(recs) == len({r["query_id"] for r in recs}) == s["num_written"] == s["num_requested"]
    assert (
        sum(c["overall"] is None for r in recs for c in r["candidates"]) == s["num_annotation_failures"]
    )  # each unscored candidate counted
    with FakeOpenAIServer({"empty": 1.0}, roles=("speaker",)) as srv:
        r = mascot(*generate_args(srv.url, esconv, tmp_path / "s", "--strict"))
    one_line_error(r, "mascot generate: --strict: num_empty_responses: an empty candidate for")


def test_generate_failed_speaker_counted_as_generation_failure(esconv, tmp_path):
    with FakeOpenAIServer({"error_500": 1.0}, roles=("speaker",)) as srv:
        r = mascot(*generate_args(srv.url, esconv, tmp_path, "--personas", "The Anchor"))
    # nothing written: a failure, counts kept (the last line; the stage's dataset writer may print progress before it)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("mascot generate: 0 of 3") and "num_generation_failures 3" in last, last
    s = summaries(tmp_path / "individual_ESConv_fake-model" / "runs")[-1]
    assert (
        s["status"],
        s["num_requested"],
        s["num_written"],
        s["num_generation_failures"],
        s["num_skipped_samples"],
    ) == ("failed", 3, 0, 3, 3)


@pytest.fixture(scope="module")
def conversations(esconv, tmp_path_factory):
    out = tmp_path_factory.mktemp("convs")
    with FakeOpenAIServer({}) as srv:
        r = mascot(*episode_args(srv.url, esconv, out, 6, 2))
    assert r.returncode == 0, r.stderr[-3000:]
    return out / EP


def judge_args(url, inp, out, *extra):
    return [
        "judge",
        "--judge-server-url",
        url,
        "--judge",
        "fake-model",
        "--input-file",
        inp,
        "--output-dir",
        out,
        "--no-progress",
        "--max-retries",
        "1",
        "--request-timeout",
        "2",
        *extra,
    ]


def test_judge_tolerant_under_malformed_bodies_and_outage(conversations, tmp_path):
    with FakeOpenAIServer({"malformed": 0.3, "no_choices": 0.2, "error_500": 0.2}, seed=4) as srv:
        r = mascot(*judge_args(srv.url, conversations, tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"judge_{conversations.stem}.runs")[-1]
    assert s["status"] == "completed" and s["num_annotation_failures"] > 0
    assert s["num_written"] + s["num_skipped_samples"] == s["num_requested"] == 12  # 6 records x 2 rubric kinds
    assert s["num_written"] > 0
    # the faults are drawn from each request's body, so which kind loses every record depends on the conversations' text; a kind whose
    # every request failed writes no file (its records are counted as skipped above)
    files = [tmp_path / f"scores_{k}_{conversations.stem}.jsonl" for k in ("persona", "collective")]
    written = [records(p) if p.exists() else [] for p in files]
    assert sum(map(len, written)) == s["num_written"]
    for ids in written:
        assert len(ids) == len(set(ids))
    failed_items = sum(
        l["num_failures"] for p in files if p.exists() for l in map(json.loads, p.read_text().splitlines())
    )
    assert failed_items <= s["num_annotation_failures"]  # (records with nothing parsed are not written but counted)


def test_judge_all_when_every_judgement_of_one_rubric_failed(conversations, tmp_path):
    "A file whose persona judgements all failed has no persona scores file: the stage tabulates the collective scores and counts the rest."
    with FakeOpenAIServer({"malformed": 1.0}, roles=("judge",), fault_if="stay in character") as srv:
        args = ["judge-all", "--input-dir", conversations.parent, *judge_args(srv.url, conversations, tmp_path)[1:]]
        del args[args.index("--input-file") : args.index("--input-file") + 2]
        r = mascot(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (tmp_path / f"scores_persona_{conversations.stem}.jsonl").exists()
    scores = (tmp_path / "judge_scores.csv").read_text().splitlines()
    assert len(scores) > 1 and all(",persona," not in line for line in scores)
    assert (
        json.loads((tmp_path / f"metrics_persona_{conversations.stem}.json").read_text())["num_annotation_failures"] > 0
    )


def test_judge_strict_stops_on_malformed_body_with_one_line(conversations, tmp_path):
    with FakeOpenAIServer({"malformed": 1.0}) as srv:
        r = mascot(*judge_args(srv.url, conversations, tmp_path, "--strict"))
    one_line_error(r, "mascot judge: --strict:", "malformed reply")
    assert summaries(tmp_path / f"judge_{conversations.stem}.runs")[-1]["status"] == "failed"


def test_judge_overwrite_with_unreachable_server_keeps_scores(conversations, tmp_path):
    with FakeOpenAIServer({}) as srv:
        assert mascot(*judge_args(srv.url, conversations, tmp_path, "--rubric", "collective")).returncode == 0
    scores = tmp_path / f"scores_collective_{conversations.stem}.jsonl"
    before = scores.read_bytes()
    r = mascot(
        *judge_args(
            "http://127.0.0.1:9/v1",
            conversations,
            tmp_path,
            "--rubric",
            "collective",
            "--overwrite",
            "--max-retries",
            "0",
        )
    )
    one_line_error(r, "unreachable")
    assert scores.read_bytes() == before


# ---------------------------------------------------------------- mascot run: bad configs are one line
@pytest.mark.parametrize(
    "text,needle", [("run_name: [x\n", "not valid YAML"), ("- candidates\n- judge\n", "expected a mapping")]
)
def test_mascot_run_bad_yaml_is_one_line(tmp_path, text, needle):
    (tmp_path / "c.yaml").write_text(text)
    r = mascot("run", tmp_path / "c.yaml", "--runs-dir", tmp_path / "runs", timeout=60)
    one_line_error(r, "mascot run:", "c.yaml", needle)
    assert not (tmp_path / "runs").exists()


def test_real_bug_keeps_traceback_and_debug_shows_it(tmp_path):
    r = mascot("episode", "--max-concurrency", "0", env={"MASCOT_DEBUG": "1"}, timeout=30)
    assert r.returncode != 0 and "Traceback" in r.stderr and "--max-concurrency must be >= 1" in r.stderr


# ---------------------------------------------------------------- the llm layer: reasoning, keys, refusals, credentials, several servers
def run_files_text(*roots: Path) -> str:
    "Everything a run wrote under `roots` (records, summaries, traces, fingerprints), as one string to search for secrets."
    return "\n".join(
        p.read_text(errors="replace") for root in roots for p in sorted(Path(root).rglob("*")) if p.is_file()
    )


@pytest.mark.served
@pytest.mark.integration
def test_thinking_server_leaves_no_think_text_and_asks_for_no_thinking(esconv, tmp_path):
    with FakeOpenAIServer({}, think=True) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 3, 2))
        bodies = list(srv.requests)
    assert r.returncode == 0, r.stderr[-3000:]
    assert bodies and all(b.get("chat_template_kwargs") == {"enable_thinking": False} for b in bodies)
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert s["num_written"] == 3 and s["num_directive_parse_failures"] == 0 and s["num_random_agent_fallbacks"] == 0
    assert s["num_reasoning_stripped"] == len(bodies) > 0  # every reply came with a block: each one removed and counted
    text = (tmp_path / EP).read_text()
    assert "<think>" not in text and "</think>" not in text and "weigh this carefully" not in text
    for rec in map(json.loads, text.splitlines()):
        assert all(t["response"] for t in rec["turns"])
        assert all(t.get("directive_parsed") is not False for t in rec["turns"] if t.get("turn_type") != "user")


@pytest.mark.served
@pytest.mark.integration
def test_enable_thinking_flag_reaches_every_request(esconv, tmp_path):
    with FakeOpenAIServer({}, think=True) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 1, 1, "--enable-thinking"))
        bodies = list(srv.requests)
    assert r.returncode == 0, r.stderr[-3000:]
    assert bodies and all(b["chat_template_kwargs"] == {"enable_thinking": True} for b in bodies)
    assert "<think>" not in (tmp_path / EP).read_text()  # thinking allowed, still never stored


@pytest.mark.served
@pytest.mark.integration
def test_local_plain_http_server_never_gets_the_openai_key(esconv, tmp_path):
    env = {"OPENAI_API_KEY": "sk-planted-openai-0123456789", "MASCOT_API_KEY": ""}
    with FakeOpenAIServer({}) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path / "a", 1, 1), env=env)
        seen = dict(srv.auth)
    assert r.returncode == 0, r.stderr[-3000:]
    assert seen and not any("sk-planted" in h for h in seen), seen
    with FakeOpenAIServer({}) as srv:  # the loopback server's own variable is sent to it
        r = mascot(*episode_args(srv.url, esconv, tmp_path / "b", 1, 1), env={**env, "MASCOT_API_KEY": "local-key-42"})
        seen = dict(srv.auth)
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(seen) == {"Bearer local-key-42"}, seen


@pytest.mark.served
@pytest.mark.integration
@pytest.mark.parametrize("refuse_on", [("models", "chat"), ("chat",)], ids=["at-start", "every-chat-call"])
def test_refused_key_is_one_line_not_retried_and_the_run_failed(esconv, tmp_path, refuse_on):
    key = "planted-mascot-key-0123456789"
    with FakeOpenAIServer({}, refuse=401, refuse_on=refuse_on) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 4, 2, "--max-retries", "3"), env={"MASCOT_API_KEY": key})
        num_requests = sum(srv.auth.values())
    line = one_line_error(r, "http://127.0.0.1:", "MASCOT_API_KEY", "HTTP 401", "not retried")
    assert (
        key not in r.stderr + r.stdout and "invalid key" not in line
    )  # the server echoes the key in its body: never shown
    assert summaries(tmp_path / f"{EP}.runs")[-1]["status"] == "failed"
    # the model list (ids, then identities), then at most each episode's first request: none retried
    assert num_requests <= 6
    assert key not in run_files_text(tmp_path)


@pytest.mark.served
@pytest.mark.integration
def test_credentials_in_server_urls_reach_no_file(esconv, tmp_path):
    url_key, env_key = "urlsecret-0123456789", "envsecret-0123456789"
    with FakeOpenAIServer({}) as srv:
        public, url = srv.url, srv.url.replace("http://", f"http://someone:{url_key}@")
        r = mascot(*episode_args(url, esconv, tmp_path, 2, 1, "--trace-role-calls"), env={"MASCOT_API_KEY": env_key})
    assert r.returncode == 0, r.stderr[-3000:]
    written = run_files_text(tmp_path)
    assert list(tmp_path.rglob("role_call_trace.jsonl")) and "metadata" in written
    assert url_key not in written and env_key not in written and "someone" not in written
    assert url_key not in r.stderr + r.stdout
    rec = json.loads((tmp_path / EP).read_text().splitlines()[0])
    assert rec["metadata"]["roles"]["speaker"]["backend"] == f"openai:{public}"


@pytest.mark.served
@pytest.mark.integration
def test_requests_spread_over_comma_separated_servers(esconv, tmp_path):
    with FakeOpenAIServer({}) as a, FakeOpenAIServer({}) as b:
        r = mascot(*episode_args(f"{a.url},{b.url}", esconv, tmp_path, 6, 2, "--max-concurrency", "4"))
        counts = (a.num_chat, b.num_chat)
    assert r.returncode == 0, r.stderr[-3000:]
    assert summaries(tmp_path / f"{EP}.runs")[-1]["num_written"] == 6
    assert min(counts) > 0 and min(counts) / max(counts) >= 0.6, counts  # least outstanding requests: near even


def tiny_adapter(folder: Path, hidden: int = 64, layers: int = 2) -> Path:
    "A LoRA adapter folder for the tiny test model, written by hand (config and lora_A/lora_B tensors)."
    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(
        json.dumps(
            {"peft_type": "LORA", "base_model_name_or_path": "tiny-random-llama", "r": 4, "target_modules": ["q_proj"]}
        )
    )
    tensors = {}
    for i in range(layers):
        pre = f"base_model.model.model.layers.{i}.self_attn.q_proj"
        tensors.update(
            {
                f"{pre}.lora_A.weight": np.zeros((4, hidden), np.float32),
                f"{pre}.lora_B.weight": np.zeros((hidden, 4), np.float32),
            }
        )
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return folder


@pytest.mark.integration
@pytest.mark.parametrize("damage", ["bad_json", "torn_weights", "no_weights", "other_base"])
def test_broken_speaker_adapter_fails_at_start_in_one_line(esconv, tmp_path, damage):
    adapter = tiny_adapter(tmp_path / "adapter", *((576, 30) if damage == "other_base" else ()))
    weights = adapter / "adapter_model.safetensors"
    if damage == "bad_json":
        (adapter / "adapter_config.json").write_text("{not json")
    elif damage == "torn_weights":
        weights.write_bytes(weights.read_bytes()[:-50])
    elif damage == "no_weights":
        weights.unlink()
    args = ["eval", "--systems", "mascot-i", "--speaker-adapter", adapter, "--dataset", "ESConv", "--split", "train"]
    args += [
        "--data-path",
        esconv,
        "--num-samples",
        1,
        "--num-turns",
        1,
        "--output-dir",
        tmp_path / "out",
        "--no-progress",
    ]
    r = mascot(*args, env={"MASCOT_TINY_MODEL": "1", "HF_HUB_OFFLINE": "1"})
    needle = {
        "bad_json": "adapter_config.json is not valid JSON",
        "torn_weights": "adapter_model.safetensors is unreadable",
        "no_weights": "no adapter weights",
        "other_base": "hidden size 576",
    }[damage]
    one_line_error(r, str(adapter), needle)
    assert not list((tmp_path / "out").rglob("*.jsonl")), "no records from a run that could not start"
    assert {s["status"] for root in (tmp_path / "out").rglob("*.runs") for s in summaries(root)} <= {"failed"}


# ---------------------------------------------------------------- nothing written is a failure; one writer per output; a full disk is one line
def test_run_that_wrote_nothing_fails_with_one_line_and_keeps_the_counts(esconv, tmp_path):
    with FakeOpenAIServer({"error_500": 1.0}, roles=("speaker",)) as srv:
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 3, 1, "--max-retries", "0"))
    one_line_error(r, "mascot episode: 0 of 3 mascot episodes written", "num_generation_failures 3")
    assert r.stdout.strip() == ""  # no output path printed for output that was not made
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert (s["status"], s["num_requested"], s["num_written"], s["num_generation_failures"]) == ("failed", 3, 0, 3)
    assert s["error"].startswith("NothingWrittenError: 0 of 3")


@pytest.mark.parametrize(
    "dataset,name,text,needle",
    [
        (
            "ED",
            "test.csv",
            "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n",
            "test.csv: no conversations (only the header)",
        ),
        ("ESConv", "ESConv.json", "[]", "ESConv.json: no conversations (an empty list)"),
    ],
)
def test_no_contexts_is_one_line_naming_the_file(tmp_path, dataset, name, text, needle):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / name).write_text(text)
    args = episode_args("http://127.0.0.1:9/v1", tmp_path / "data", tmp_path / "out", 2, 1)
    args[args.index("--dataset") + 1], args[args.index("--split") + 1] = dataset, "test"
    one_line_error(mascot(*args, timeout=60), "mascot episode:", needle)


def test_second_writer_on_one_output_stops_naming_the_first(esconv, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
    args = episode_args(tmp_path, esconv, tmp_path, 4, 2, "--max-concurrency", "1", "--request-timeout", "10")
    with FakeOpenAIServer({"slow": 1.0}, slow_s=1.0) as srv:
        args[args.index("--vllm-server-url") + 1] = srv.url
        first = subprocess.Popen(
            [sys.executable, "-m", "mascot.cli", *map(str, args)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.time() + 30
            while time.time() < deadline and not list((tmp_path / f"{EP}.runs").glob("*/run_summary.json")):
                time.sleep(0.2)
            for extra in ((), ("--resume",)):
                r = mascot(*args, *extra)
                one_line_error(r, f"{EP} is being written by another process (PID {first.pid})")
            srv.faults = {}
            _, err = first.communicate(timeout=BOUND_S)
        finally:
            if first.poll() is None:
                first.kill()
    assert first.returncode == 0, err[-3000:]
    ids = records(tmp_path / EP)
    assert len(ids) == len(set(ids)) == 4


def test_resume_refuses_duplicated_ids_naming_them(esconv, tmp_path):
    with FakeOpenAIServer({}) as srv:
        assert mascot(*episode_args(srv.url, esconv, tmp_path, 2, 1)).returncode == 0
        lines = (tmp_path / EP).read_text().splitlines()
        (tmp_path / EP).write_text("\n".join([*lines, lines[0]]) + "\n")  # what two writers at once left before locks
        before = (tmp_path / EP).read_bytes()
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 3, 1, "--resume"))
    one_line_error(r, f"{EP}: record ids written more than once ('{json.loads(lines[0])['conv_id']}')", "--overwrite")
    assert (tmp_path / EP).read_bytes() == before


@pytest.fixture
def small_disk(tmp_path):
    "A 64 KiB tmpfs at tmp_path/disk (mounting needs root), unmounted afterwards."
    if os.geteuid() != 0:
        pytest.skip("a full disk is simulated with a small tmpfs, and mounting one needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True, text=True)
    if m.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {m.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    "Fill `disk` until only `leave` bytes are free."
    filler = disk / "filler"
    with open(filler, "ab") as f:
        while True:
            st = os.statvfs(disk)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                break
            try:
                f.write(b"\0" * min(4096, free - leave))
                f.flush()
            except OSError:
                break
    return filler


def test_full_disk_is_one_line_leaves_no_tmp_and_marks_the_run_failed(esconv, small_disk):
    with FakeOpenAIServer({}) as srv:
        filler = fill(small_disk)  # full before the start: nothing can be recorded, one line says why
        r = mascot(*episode_args(srv.url, esconv, small_disk / "full", 2, 1))
        one_line_error(r, "no space left on device")
        filler.unlink()
        fill(small_disk, leave=24 << 10)  # full in the middle: the run config fits, the conversations do not
        r = mascot(*episode_args(srv.url, esconv, small_disk / "mid", 8, 2))
    one_line_error(r, "no space left on device")
    assert not list(small_disk.rglob("*.tmp")) and not list(small_disk.rglob("*.new"))
    s = summaries(small_disk / "mid" / f"{EP}.runs")[-1]
    assert s["status"] == "failed" and "no space left on device" in s["error"]
    out = small_disk / "mid" / EP
    for line in out.read_text().splitlines() if out.exists() else []:  # whole records only: a resume continues it
        json.loads(line)


def test_dotenv_is_read_from_the_working_folder_only_and_bad_bytes_are_one_line(tmp_path):
    (tmp_path / ".env").write_bytes(b"MASCOT_API_KEY=sk-\xff-not-text\n")
    (tmp_path / "sub").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE"}
    env.pop("MASCOT_NO_DOTENV", None)
    run = lambda cwd: subprocess.run(
        [sys.executable, "-m", "mascot.cli", "episode", "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )
    r = run(tmp_path / "sub")  # a parent's .env is not read
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    one_line_error(run(tmp_path), f"{tmp_path / '.env'}: not UTF-8 text (byte 0xff at offset 18)")


@pytest.mark.served
@pytest.mark.integration
def test_thinking_judge_scores_parse_and_blocks_are_counted(conversations, tmp_path):
    with FakeOpenAIServer({}, think=True) as srv:
        r = mascot(*judge_args(srv.url, conversations, tmp_path))
        bodies = list(srv.requests)
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"judge_{conversations.stem}.runs")[-1]
    assert s["num_annotation_failures"] == 0 and s["num_written"] == s["num_requested"] == 12
    assert s["num_reasoning_stripped"] == len(bodies) > 0
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in bodies)
    assert "<think>" not in run_files_text(tmp_path)


@pytest.mark.integration
def test_a_50_mb_utterance_is_cut_to_the_context_not_tokenized_whole(esconv, tmp_path):
    "The embedded model keeps an over-long prompt's end; tokenizing a 50 MB utterance whole took 21 GB (here: 6 GB of address space)."
    import resource

    data = json.loads((esconv / "ESConv.json").read_text())[:1]
    seeker = next(t for t in data[0]["dialog"] if t["speaker"] == "seeker")
    seeker["content"] = "I feel so alone. " * (50_000_000 // 17)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ESConv.json").write_text(json.dumps(data))
    args = episode_args("-", tmp_path / "data", tmp_path / "out", 1, 1)
    del args[1:5]  # no server, no model name: the embedded default (the tiny model here)
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASCOT_TINY_MODEL": "1", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "mascot.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=BOUND_S * 3,
        env=env,
        cwd=ROOT,
        preexec_fn=limit,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert summaries(tmp_path / "out" / f"{EP}.runs")[-1]["num_written"] == 1
