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
        [sys.executable, "-m", "mascot.apps.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def esconv(shared_data_dir, tmp_path_factory):
    "A private copy of the ESConv sample (the tests never write beside the shared data)."
    d = tmp_path_factory.mktemp("data") / "esconv"
    shutil.copytree(shared_data_dir / "esconv", d)
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
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 12))
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
    assert s["status"] == "completed"
    assert s["num_generation_failures"] > 0  # some episodes still failed after their retries: counted, not fatal
    assert (
        s["num_written"] + s["num_generation_failures"] == s["num_requested"] == 12
    )  # every requested item written or counted
    assert s["num_skipped_samples"] == s["num_generation_failures"]
    ids = records(tmp_path / EP)
    assert len(ids) == len(set(ids)) == s["num_written"]
    assert (
        all(e.startswith(f"{e.split(':')[0]}:") for e in s["errors"])
        and len(s["errors"]) == s["num_generation_failures"]
    )
    with FakeOpenAIServer({}, seed=3) as srv:  # the server recovers: --resume does only what is missing
        r = mascot(*episode_args(srv.url, esconv, tmp_path, 12, 2, "--resume"))
    assert r.returncode == 0, r.stderr[-3000:]
    s2 = summaries(tmp_path / f"{EP}.runs")[-1]
    assert (s2["num_requested"], s2["num_written"], s2["num_generation_failures"]) == (
        s["num_generation_failures"],
        s["num_generation_failures"],
        0,
    )
    ids = records(tmp_path / EP)
    assert len(ids) == len(set(ids)) == 12
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
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / f"{EP}.runs")[-1]
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
            "mascot.apps.cli",
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
    assert r.returncode == 0, r.stderr[-3000:]
    s = summaries(tmp_path / "individual_ESConv_fake-model" / "runs")[-1]
    assert (
        s["status"],
        s["num_requested"],
        s["num_written"],
        s["num_generation_failures"],
        s["num_skipped_samples"],
    ) == ("completed", 3, 0, 3, 3)


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
