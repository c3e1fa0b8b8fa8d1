"`mascot chat` for real: lines piped into the terminal command, and the web page driven by headless Chromium, on the embedded SmolLM2-135M."

import json, os, signal, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from browser import chrome, free_port
from mascot.core.store import read_jsonl
from mascot.core.records import validate_episode
from mascot.domain.personas import SUPPORT_ROSTER

ROOT = Path(__file__).resolve().parents[1]
# few tokens, one director -> speaker step per message: the 135M model on two shared cores
SMALL = ["--share-model", "--agent-turns", "1", "--director-max-tokens", "40", "--speaker-max-tokens", "20"]
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "OMP_WAIT_POLICY": "PASSIVE",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "2",
}


def mascot(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mascot.cli", *args],
        cwd=kw.pop("cwd", ROOT),
        env=ENV,
        capture_output=True,
        text=True,
        **kw,
    )


@pytest.mark.integration
def test_piped_lines_become_a_saved_episode(tmp_path, data_dir):
    out = tmp_path / "chat"
    r = mascot(
        "chat",
        "--dataset",
        "ED",
        "--data-path",
        str(data_dir / "empathetic_dialogues"),
        "--split",
        "train",
        "--context-index",
        "1",
        "--output-dir",
        str(out),
        "--show-directives",
        *SMALL,
        input="My sister stopped talking to me.\n/quit\nnever read\n",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = out.glob("mascot_ED_*.jsonl")
    assert f"saved: {path}" in r.stdout
    (rec,) = read_jsonl(path)
    validate_episode(rec)
    turns = rec["turns"]
    user = [t for t in turns if t.get("turn_type") == "user"]
    agents = [t for t in turns if t.get("turn_type") != "user"]
    assert user[-1]["response"] == "My sister stopped talking to me." and "never read" not in json.dumps(rec)
    assert len(agents) == 2 and {t["agent_name"] for t in agents} <= set(
        SUPPORT_ROSTER.names
    )  # one reply to the opening, one to the message
    assert all(t["directive"] and t["directive"]["agent_name"] == t["agent_name"] for t in agents)
    # the round the person's message closes: opening, reply, message in round 0; the next reply in round 1
    assert [t["round_id"] for t in turns][-2:] == [0, 1] and turns[-1].get("turn_type") != "user"
    assert (
        rec["metadata"]["user"] == "human"
        and rec["metadata"]["untrained"] is True
        and "user_model" not in rec["metadata"]
    )
    for t in agents:  # the terminal showed each reply under its speaker's name and persona, after the director's pick
        role = SUPPORT_ROSTER.find(t["agent_name"]).role
        mark = " [random speaker: the director's output did not parse]" if t["directive_source"] == "fallback" else ""
        d = t["directive"]
        assert (
            f"  director → {t['agent_name']} ({d['action']}, {d['tone']})" in r.stdout
            and f"{t['agent_name']} ({role}){mark}: {t['response']}" in r.stdout
        ), r.stdout
    # mascot judge builds its persona and collective items from it (running the 135M judge takes minutes; that is the judge's test)
    from mascot.judging.panel import record_items, record_domain

    items = {k: record_items(rec, k, record_domain(rec, path)) for k in ("persona", "collective")}
    assert len(items["persona"]) == 2 and len(items["collective"]) == 1
    # mascot metrics reads it like any episode file
    m = mascot(
        "metrics",
        "--input-file",
        str(path),
        "--skip-nli",
        "--no-progress",
        "--output-file",
        str(tmp_path / "m.json"),
        timeout=300,
    )
    assert m.returncode == 0, m.stderr[-2000:]
    report = json.loads((tmp_path / "m.json").read_text())
    assert report["overall"]["num_conversations"] == 1 and report["conversations"][0]["num_agent_turns"] == 2
    assert report["conversations"][0]["conv_id"] == rec["conv_id"]


def test_chat_on_a_served_model(openai_server, tmp_path):
    "The same session on an OpenAI-compatible server (`transformers serve` of the same model): every role's calls go there."
    import asyncio, io
    from mascot.studies.chat import ChatSession, chat_terminal
    from mascot.studies.chat_config import ChatConfig

    cfg = ChatConfig(
        dataset="ESConv",
        situation="I moved abroad and I know nobody here.",
        vllm_server_url=openai_server["url"],
        model_name=openai_server["model"],
        share_model=True,
        agent_turns=1,
        max_rounds=1,
        director_max_tokens=40,
        speaker_max_tokens=20,
        output_dir=str(tmp_path),
    )
    session = ChatSession(cfg)
    out = io.StringIO()
    path = asyncio.run(chat_terminal(session, io.StringIO("Where do I even start?\nnot read: --max-rounds 1\n"), out))
    (rec,) = read_jsonl(path)
    validate_episode(rec)
    assert [t.get("turn_type", "agent") for t in rec["turns"]] == ["user", "agent"] and rec["situation"].startswith(
        "I moved abroad"
    )
    assert rec["metadata"]["director_model"] == rec["metadata"]["speaker_model"] == openai_server["model"]
    assert session.client.routes["speaker"].url == openai_server["url"] and "not read" not in out.getvalue()


@pytest.mark.integration
def test_bad_flags_are_one_line_and_exit_2(tmp_path):
    "Half of a system's adapters is an error naming the missing flag; a package error exits 2 with one line."
    r = mascot(
        "chat",
        "--dataset",
        "ED",
        "--system",
        "mascot",
        "--director-adapter",
        str(tmp_path),
        "--output-dir",
        str(tmp_path),
        input="",
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, (r.returncode, r.stderr)
    assert "--speaker-adapter" in r.stderr and "--share-model" in r.stderr
    r = mascot(
        "chat",
        "--dataset",
        "ED",
        "--context-id",
        "nope",
        "--share-model",
        "--output-dir",
        str(tmp_path),
        input="",
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--context-id 'nope'" in r.stderr, r.stderr


# --- the first hour: no adapter flags --------------------------------------------------------------------------------------

FIRST = "I lost my job today."


def finished_run(root: Path) -> dict[str, Path]:
    "A run folder as `mascot run` leaves it, its speaker and director stages completed with random LoRA adapters of the tiny model."
    from mascot.llm.embedded_backend import make_random_lora
    from mascot.llm.embedded_weights import EMBEDDED_DEFAULT

    out = {}
    for stage, role, seed in (("12_speaker_grpo", "speaker", 1), ("22_director_grpo", "director", 2)):
        sdir = root / "runs" / "demo" / stage
        adapter = make_random_lora(EMBEDDED_DEFAULT, sdir / "out" / f"{role}_adapter", seed=seed)
        (sdir / "run_summary.json").write_text(json.dumps({"status": "completed"}))
        (sdir / "outputs.json").write_text(json.dumps({"path": str(adapter.resolve())}))
        out[role] = adapter.resolve()
    (root / "runs" / "demo" / "pipeline_config.json").write_text(json.dumps({"model_name": EMBEDDED_DEFAULT}))
    return out


def chat_in(folder: Path) -> subprocess.CompletedProcess:
    "The README's first-hour command, run in `folder` on the tiny random model."
    return subprocess.run(
        [sys.executable, "-m", "mascot.cli", "chat", "--dataset", "ED"],
        cwd=folder,
        env={**ENV, "MASCOT_TINY_MODEL": "1"},
        input=f"{FIRST}\n/quit\n",
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.integration
def test_chat_uses_the_latest_finished_runs_adapters(tmp_path, monkeypatch):
    monkeypatch.setenv("MASCOT_TINY_MODEL", "1")
    adapters = finished_run(tmp_path)
    r = chat_in(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert (
        f"using the trained adapters of run runs/demo: director {adapters['director']}, speaker {adapters['speaker']}"
        in out
    ), out
    assert f"  director: smollm2-135m-instruct + LoRA {adapters['director']}" in out
    assert f"  speaker: smollm2-135m-instruct + LoRA {adapters['speaker']}" in out
    assert "is replying…" in out and "director → " in out  # progress before each reply
    (path,) = (tmp_path / "outputs/chat").glob("mascot_ED_*.jsonl")
    assert f"saved: {path.relative_to(tmp_path)}" in out
    (rec,) = read_jsonl(path)
    validate_episode(rec)
    assert "untrained" not in rec["metadata"] and FIRST in [t["response"] for t in rec["turns"]]
    agents = [t for t in rec["turns"] if t.get("turn_type") != "user"]
    assert agents and all(t["directive_source"] in ("director", "fallback") for t in agents)
    for t in agents:  # the fallbacks of the random director are marked where they are shown
        if t["directive_source"] == "fallback":
            assert "[random speaker: the director's output did not parse]" in out


@pytest.mark.integration
def test_chat_without_runs_talks_to_the_base_model(tmp_path):
    r = chat_in(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        "no finished run with a trained director and speaker adapter under runs/: talking to the untrained base model"
        in r.stdout
    )
    assert "  director: smollm2-135m-instruct\n" in r.stdout and "  speaker: smollm2-135m-instruct\n" in r.stdout
    (path,) = (tmp_path / "outputs/chat").glob("mascot_ED_*.jsonl")
    (rec,) = read_jsonl(path)
    assert rec["metadata"]["untrained"] is True and rec["turns"][-1].get("turn_type") != "user"
    # no context flag: the person speaks first, and the group answers that message, not a dataset conversation's opening
    assert "you speak first" in r.stdout and "situation:" not in r.stdout
    assert rec["turns"][0]["turn_type"] == "user" and rec["turns"][0]["response"] == FIRST
    assert all(t.get("turn_type") != "user" for t in rec["turns"][1:])


# --- the browser -------------------------------------------------------------------------------------------------------------


def start_server(args: list[str], log: Path, url: str, timeout: float = 120) -> subprocess.Popen:
    "Start a `mascot` web command on 127.0.0.1 and wait until it answers."
    proc = subprocess.Popen(
        [sys.executable, "-m", "mascot.cli", *args],
        cwd=ROOT,
        env=ENV,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited early:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail(f"server did not come up:\n{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen):
    proc.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown: the session is saved once more
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.integration
def test_web_chat_shows_the_group(tmp_path, data_dir):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port, out = free_port(), tmp_path / "chat"
    url = f"http://127.0.0.1:{port}/"
    proc = start_server(
        [
            "chat",
            "--web",
            "--port",
            str(port),
            "--dataset",
            "ED",
            "--output-dir",
            str(out),
            "--show-directives",
            *SMALL,
        ],
        tmp_path / "server.log",
        url,
    )
    driver = None
    try:
        assert f"open {url}" in (tmp_path / "server.log").read_text()
        driver = chrome(tmp_path, (1200, 900))
        driver.get(url)
        wait = WebDriverWait(driver, 400)
        wait.until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
        )  # the page is ready for the person's first message
        before = len(driver.find_elements(By.CSS_SELECTOR, ".turn"))
        roster = driver.find_element(By.ID, "roster").text
        assert all(p.name in roster and p.role in roster for p in SUPPORT_ROSTER.personas)
        driver.find_element(By.ID, "msg").send_keys("I keep worrying about my exam.")
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-rounds") == "1")
        turns = driver.find_elements(By.CSS_SELECTOR, ".turn")
        assert len(turns) == before + 2
        mine, reply = turns[-2], turns[-1]
        assert (
            "user" in mine.get_attribute("class")
            and mine.find_element(By.CSS_SELECTOR, ".text").text == "I keep worrying about my exam."
        )
        name = reply.find_element(By.CSS_SELECTOR, ".name").text
        assert (
            name in SUPPORT_ROSTER.names
            and reply.find_element(By.CSS_SELECTOR, ".persona").text == SUPPORT_ROSTER.find(name).role
        )
        directive = reply.find_element(By.CSS_SELECTOR, ".directive")
        assert directive.is_displayed() and directive.text.startswith(f"director → {name}: ")
        shown_reply = reply.find_element(By.CSS_SELECTOR, ".text").text
    finally:
        if driver:
            driver.quit()
        stop_server(proc)
    (path,) = out.glob("mascot_ED_*.jsonl")
    (rec,) = read_jsonl(path)
    validate_episode(rec)
    assert rec["turns"][-2]["response"] == "I keep worrying about my exam." and rec["turns"][-1]["agent_name"] == name
    assert " ".join(rec["turns"][-1]["response"].split()) == " ".join(shown_reply.split())


# --- the web chat on a served model: responsive while a round runs, bounded on SIGTERM ---------------------------------------


def post(url: str, text: str, timeout: float = 30) -> tuple[int, dict]:
    "POST a message as the page does: (status, JSON body)."
    req = urllib.request.Request(
        url, data=json.dumps({"text": text}).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def served_chat(tmp_path: Path, srv, *flags: str) -> tuple[subprocess.Popen, str, Path]:
    "`mascot chat --web` on the fake OpenAI server `srv` (the person speaks first): the process, its URL and its output folder."
    port, out = free_port(), tmp_path / "chat"
    url = f"http://127.0.0.1:{port}/"
    args = ["chat", "--web", "--port", str(port), "--vllm-server-url", srv.url, "--model-name", srv.model]
    args += ["--share-model", "--agent-turns", "1", "--situation", "I moved abroad.", "--output-dir", str(out), *flags]
    return start_server(args, tmp_path / "server.log", url, timeout=60), url, out


@pytest.mark.served
def test_web_chat_reads_during_a_round_and_stops_within_seconds(tmp_path):
    "`GET /api/state` answers while a round generates; on SIGTERM the round finishes and is saved, a queued message gets 503."
    import threading
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(faults={"slow": 1.0}, roles=("speaker",), slow_s=3.0) as srv:
        proc, url, out = served_chat(tmp_path, srv, "--shutdown-wait", "10")
        try:
            state = lambda: json.loads(urllib.request.urlopen(url + "api/state", timeout=10).read())
            assert state()["started"] and not state()["busy"]
            replies: dict[str, tuple[int, dict]] = {}
            send = lambda text: threading.Thread(target=lambda: replies.update({text: post(url + "api/message", text)}))
            first, second = send("Where do I even start?"), send("Hello?")
            first.start()
            time.sleep(0.8)  # the speaker's request is now waiting on the slow server
            t0 = time.time()
            during = state()
            assert time.time() - t0 < 1.5 and during["busy"], during  # read at once, not after the round
            assert [t["text"] for t in during["turns"]] == ["Where do I even start?"]
            second.start()  # queued behind the round in progress
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            t_stop = time.time()
            proc.wait(15)
            stopped_in = time.time() - t_stop
            first.join(5), second.join(5)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0 and stopped_in < 8, (proc.returncode, stopped_in, (tmp_path / "server.log").read_text())
    code, body = replies["Where do I even start?"]
    assert code == 200 and [t["user"] for t in body["turns"]] == [True, False], body  # the round in progress finished
    code, body = replies["Hello?"]
    assert code == 503 and "server is stopping" in body["detail"], body
    (path,) = out.glob("*.jsonl")
    (rec,) = read_jsonl(path)
    assert [t["response"] for t in rec["turns"]][0] == "Where do I even start?" and len(rec["turns"]) == 2


@pytest.mark.served
def test_web_chat_streams_the_reply(tmp_path):
    "`POST /api/message/stream`: the director's choice, then the reply in several pieces well before the round ends, then `done`."
    from fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(stream_s=0.08) as srv:
        proc, url, out = served_chat(tmp_path, srv)
        events = []
        try:
            req = urllib.request.Request(
                url + "api/message/stream",
                data=json.dumps({"text": "Where do I even start?"}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.headers["Content-Type"].startswith("text/event-stream")
                for raw in r:  # one line at a time, as the server sends them
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        kind = line[len("event: ") :]
                    elif line.startswith("data: "):
                        events.append((kind, json.loads(line[len("data: ") :]), time.monotonic()))
        finally:
            stop_server(proc)
    kinds = [k for k, _, _ in events]
    first = kinds.index("text")
    assert kinds[-1] == "done" and kinds.index("director") < first and kinds.count("text") > 5, kinds
    assert events[-1][2] - events[first][2] > 0.5  # the first words came well before the round ended
    (turn,) = [d for k, d, _ in events if k == "turn"]
    assert "".join(d["text"] for k, d, _ in events if k == "text") == turn["text"] and turn["text"].startswith(
        "That sounds"
    )
    assert events[-1][1]["turns"][-1]["text"] == turn["text"]
    (path,) = out.glob("*.jsonl")
    assert [t["response"] for t in next(read_jsonl(path))["turns"]] == ["Where do I even start?", turn["text"]]


@pytest.mark.served
@pytest.mark.browser
def test_web_page_shows_the_reply_as_it_is_written(tmp_path):
    "The page shows the speaker and the first words of the reply while it streams, then the turn as saved."
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from fake_openai_server import FakeOpenAIServer
    from browser import console_errors

    with FakeOpenAIServer(stream_s=0.15) as srv:
        proc, url, out = served_chat(tmp_path, srv, "--show-directives")
        driver = None
        try:
            driver = chrome(tmp_path, (1200, 900))
            driver.get(url)
            wait = WebDriverWait(driver, 30, poll_frequency=0.05)
            wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
            driver.find_element(By.ID, "msg").send_keys("Where do I even start?")
            driver.find_element(By.ID, "send").click()
            partial = wait.until(
                lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, ".turn.pending .text") if e.text.strip()]
            )[0]
            wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-rounds") == "1")
            turns = driver.find_elements(By.CSS_SELECTOR, ".turn")
            mine, reply = turns[-2], turns[-1]
            shown = reply.find_element(By.CSS_SELECTOR, ".text").text
            name = reply.find_element(By.CSS_SELECTOR, ".name").text
            directive = reply.find_element(By.CSS_SELECTOR, ".directive").text
            assert (
                len(turns) == 2
                and "user" in mine.get_attribute("class")
                and not driver.find_elements(By.CSS_SELECTOR, ".pending")
            )
            assert not [e for e in console_errors(driver) if "favicon.ico" not in e]
        finally:
            if driver:
                driver.quit()
            stop_server(proc)
    (rec,) = read_jsonl(next(out.glob("*.jsonl")))
    saved = rec["turns"][-1]
    assert shown == saved["response"] and name == saved["agent_name"] and directive.startswith(f"director → {name}: ")
    assert shown.startswith(partial) and len(partial) < len(shown)  # words were on screen before the reply was whole
