"""`mascot arena` for real: two annotators vote in headless Chromium, the server is killed mid-study and resumed, and `mascot arena-report`'s
numbers are those of the votes; bad input is one line."""

import json, os, signal, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from browser import chrome, free_port
from mascot.studies.arena import demo_files, demo_record, study_id
from mascot.core.store import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1"}


def mascot(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mascot.cli", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def start_arena(args: list[str], log: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mascot.cli", "arena", "--port", str(port), *args],
        cwd=ROOT,
        env=ENV,
        stdout=open(log, "a"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mascot arena exited early:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/study", timeout=2)
            return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    pytest.fail(f"mascot arena did not come up:\n{log.read_text()[-3000:]}")


def vote_in_browser(driver, wanted: dict[str, str], count: int, reasons: dict[str, str] = {}):
    "Vote on the next `count` pairs: `wanted[pair]` is the system to pick (or 'tie'); the side is read off the blind panes' text."
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    body = lambda: driver.find_element(By.TAG_NAME, "body")
    wait = WebDriverWait(driver, 30)
    for _ in range(count):
        wait.until(lambda d: body().get_attribute("data-pair") and driver.find_element(By.ID, "study").is_displayed())
        pair, done = body().get_attribute("data-pair"), int(body().get_attribute("data-done"))
        a_text, b_text = driver.find_element(By.ID, "A").text, driver.find_element(By.ID, "B").text
        assert f"on {pair}:" in a_text and f"on {pair}:" in b_text  # both sides are on the pair's context
        want = wanted[pair]
        choice = "tie" if want == "tie" else "A" if want.upper() + " reply" in a_text else "B"
        assert choice == "tie" or want.upper() + " reply" in (a_text if choice == "A" else b_text)
        if pair in reasons:
            driver.find_element(By.ID, "reason").send_keys(reasons[pair])
        driver.find_element(By.ID, f"vote-{choice}").click()
        wait.until(lambda d: int(body().get_attribute("data-done")) == done + 1)


@pytest.mark.integration
def test_two_annotators_vote_and_the_report_matches(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    fa, fb = demo_files(tmp_path / "convs")  # mascot and zero-shot on ed-1, ed-2, ed-3
    votes, log, port = tmp_path / "votes.jsonl", tmp_path / "arena.log", free_port()
    url = f"http://127.0.0.1:{port}/"
    args = ["--files", str(fa), str(fb), "--votes", str(votes), "--annotator", "alice"]
    alice = {"ed-1": "mascot", "ed-2": "mascot", "ed-3": "tie"}
    bob = {"ed-1": "mascot", "ed-2": "zero-shot", "ed-3": "tie"}
    proc = start_arena(args, log, port)
    driver = None
    try:
        assert f"at {url}" in log.read_text()
        driver = chrome(tmp_path, (1300, 900))
        driver.get(url)  # the annotator id comes from --annotator
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "study").is_displayed())
        assert (
            "zero-shot" not in driver.page_source
        )  # blind: a system's name is never sent (the demo replies carry it in capitals only)
        vote_in_browser(driver, alice, 2, reasons={"ed-1": "more caring"})
        # a crash: every vote acknowledged is on disk, and a new server resumes the study where alice left it
        proc.kill()
        proc.wait()
        assert len(list(read_jsonl(votes))) == 2
        proc = start_arena(args, log, port)
        driver.get(url)
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "progress").text == "2 / 3 done")
        voted = {v["pair_id"] for v in read_jsonl(votes)}
        assert driver.find_element(By.TAG_NAME, "body").get_attribute("data-pair") not in voted
        vote_in_browser(driver, alice, 1)
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "done").is_displayed())
        driver.get(url + "?annotator=bob")
        vote_in_browser(driver, bob, 3)
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "progress").text == "3 / 3 done")
    finally:
        if driver:
            driver.quit()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    recs = list(read_jsonl(votes))
    assert sorted((v["annotator"], v["pair_id"], v["winner"]) for v in recs) == sorted(
        [("alice", p, w) for p, w in alice.items()] + [("bob", p, w) for p, w in bob.items()]
    )
    assert {v["study"] for v in recs} == {study_id(("mascot", "zero-shot"), ["ed-1", "ed-2", "ed-3"])}
    assert [v["reason"] for v in recs if v["annotator"] == "alice" and v["pair_id"] == "ed-1"] == ["more caring"]
    assert {v["left"] for v in recs} == {"mascot", "zero-shot"}  # the sides really are randomised
    judge = tmp_path / "judge.jsonl"
    judge.write_text(
        "".join(
            json.dumps({"pair_id": p, "winner": w}) + "\n"
            for p, w in (("ed-1", "mascot"), ("ed-2", "mascot"), ("ed-3", "zero-shot"))
        )
    )
    r = mascot(
        "arena-report",
        "--votes",
        str(votes),
        "--files",
        str(fa),
        str(fb),
        "--judge-file",
        str(judge),
        "--output-dir",
        str(tmp_path / "rep"),
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "rep/arena_report.json").read_text())
    # by hand: 6 votes; mascot wins 3, zero-shot 1, ties 2
    m, z = rep["by_system"]["mascot"], rep["by_system"]["zero-shot"]
    assert (m["wins"], m["losses"], m["ties"], m["win_rate"]) == (3, 1, 2, 0.5) and m["decisive_win_rate"] == 0.75
    assert (z["wins"], z["win_rate"]) == (1, 0.1667) and rep["tie_rate"]["rate"] == 0.3333
    assert m["ci95"][0] <= 0.5 <= m["ci95"][1]
    # alice [M, M, T] vs bob [M, Z, T]: p_o 2/3, p_e 1/3 -> kappa 0.5; interval alpha on (1, .5, 0): 1 - 5 * 2 / 10 = 0
    a = rep["annotators"]
    assert a["num_annotators"] == 2 and a["cohen_kappa_mean"] == 0.5 and abs(a["krippendorff_alpha"]) < 1e-4
    # majority [M, tie, tie] vs judge [M, M, Z]: agreement 1/3, kappa (1/3 - 2/9) / (7/9) = 1/7; single votes 3 of 6
    j = rep["judge"]
    assert (j["n_pairs"], j["agreement"], j["cohen_kappa"], j["vote_agreement"]) == (3, 0.3333, 0.1429, 0.5)
    assert "mascot: win rate 0.500" in r.stdout


def one_line_error(r: subprocess.CompletedProcess, *needles: str):
    assert r.returncode != 0 and r.stderr.strip() and "\n" not in r.stderr.strip(), r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def test_bad_input_is_one_line(tmp_path):
    fa, fb = demo_files(tmp_path / "a")
    _, other = demo_files(tmp_path / "b", ids=("ed-1", "ed-2", "ed-7"))
    one_line_error(
        mascot("arena", "--files", str(fa), str(other), "--votes", str(tmp_path / "v.jsonl")),
        "different contexts",
        "ed-7",
    )
    weird = tmp_path / "weird.jsonl"
    weird.write_text("".join(json.dumps(demo_record(i, "my-system", "hi")) + "\n" for i in ("ed-1", "ed-2", "ed-3")))
    one_line_error(mascot("arena", "--files", str(fa), str(weird)), "unknown system 'my-system'")
    # a vote file of another study
    fc = demo_files(tmp_path / "c", systems=("mascot", "few-shot"))
    votes = tmp_path / "votes.jsonl"
    votes.write_text(
        json.dumps(
            {
                "vote_id": "x/ed-1",
                "study": "mascot-vs-zero-shot-00000000",
                "pair_id": "ed-1",
                "annotator": "x",
                "systems": ["mascot", "zero-shot"],
                "winner": "tie",
            }
        )
        + "\n"
    )
    one_line_error(
        mascot("arena", "--files", *map(str, fc), "--votes", str(votes)),
        "holds votes of study 'mascot-vs-zero-shot-00000000'",
    )
    one_line_error(mascot("arena-report", "--votes", str(votes), "--files", *map(str, fc)), "holds votes of study")
    one_line_error(mascot("arena-report", "--votes", str(tmp_path / "none.jsonl")), "does not exist")
    assert votes.read_text().count("\n") == 1  # nothing written by a refused run


# --- one server per vote file ------------------------------------------------------------------------------------------------


@pytest.mark.served
def test_a_second_arena_on_the_same_votes_stops(tmp_path):
    fa, fb = demo_files(tmp_path / "convs")
    votes, port = tmp_path / "votes.jsonl", free_port()
    proc = start_arena(["--files", str(fa), str(fb), "--votes", str(votes)], tmp_path / "arena.log", port)
    try:
        r = mascot("arena", "--files", str(fa), str(fb), "--votes", str(votes), "--port", str(free_port()))
        one_line_error(r, f"--votes {votes} is in use by another mascot arena (PID {proc.pid})")
        assert r.returncode == 2
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- integrity, blindness and web hygiene, in process ----------------------------------------------------------------------------


def test_votes_are_tied_to_their_voter_and_to_what_was_shown(tmp_path):
    from fastapi.testclient import TestClient
    from mascot.studies.arena import VoteStore, arena_app, load_arena

    fa, fb = demo_files(tmp_path / "convs")
    store = VoteStore(tmp_path / "votes.jsonl", load_arena([str(fa), str(fb)]))
    with TestClient(arena_app(store), base_url="http://127.0.0.1:8766") as web:
        nxt = lambda who, tok=None: web.get(
            "/api/next", params={"annotator": who}, headers={"X-Annotator-Token": tok} if tok else {}
        )
        a = nxt("alice").json()
        alice = a["annotator_token"]
        assert {t["name"] for s in "AB" for t in a["pair"][s]} == {"User", "Speaker 1"}  # blind: no persona names
        assert nxt("alice").status_code == 403 and nxt("alice", "x" * 32).status_code == 403
        m = nxt("mallory").json()
        vote = lambda body, tok: web.post("/api/vote", json=body, headers={"X-Annotator-Token": tok})
        shown = a["pair"]["pair_id"]
        unseen = next(p for p in ("ed-1", "ed-2", "ed-3") if p != shown)
        as_alice = {"annotator": "alice", "pair_id": shown, "choice": "A", "token": m["pair"]["vote_token"]}
        assert vote(as_alice, m["annotator_token"]).status_code == 403  # mallory cannot vote as alice
        assert vote({**as_alice, "pair_id": unseen, "token": a["pair"]["vote_token"]}, alice).status_code == 403
        ok = {**as_alice, "token": a["pair"]["vote_token"]}
        assert vote(ok, alice).status_code == 200 and vote(ok, alice).status_code == 409
        assert vote({**ok, "reason": "x" * 5000}, alice).status_code == 413
        assert web.post("/api/vote", content=b"{" + b" " * 200_000 + b"}").status_code == 413
        assert web.get("/api/study", headers={"Host": "attacker.example"}).status_code == 400
    store.close()
    assert [v["annotator"] for v in read_jsonl(tmp_path / "votes.jsonl")] == ["alice"]


# --- the report at small n and across three systems ------------------------------------------------------------------------------


def test_report_intervals_at_small_n_and_bradley_terry_across_studies(tmp_path):
    def study_votes(a: str, b: str, wins_a: int, n: int = 6) -> Path:
        sid = study_id((a, b), [f"ed-{i}" for i in range(n)])
        p = tmp_path / f"votes-{a}-{b}.jsonl"
        rows = [
            {
                "vote_id": f"ann/ed-{i}",
                "study": sid,
                "pair_id": f"ed-{i}",
                "annotator": "ann",
                "systems": sorted([a, b]),
                "winner": a if i < wins_a else b,
            }
            for i in range(n)
        ]
        p.write_text("".join(json.dumps(v) + "\n" for v in rows + rows[:2]))  # two lines written twice: counted once
        return p

    two = tmp_path / "two.jsonl"  # 2 votes, both for zero-shot
    rows = [
        {
            "vote_id": f"{a}/ed-1",
            "study": "s",
            "pair_id": "ed-1",
            "annotator": a,
            "systems": ["mascot", "zero-shot"],
            "winner": "zero-shot",
        }
        for a in ("alice", "bob")
    ]
    two.write_text("".join(json.dumps(v) + "\n" for v in rows))
    r = mascot("arena-report", "--votes", str(two), "--output-dir", str(tmp_path / "rep2"))
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "rep2/arena_report.json").read_text())["by_system"]["mascot"]
    assert m["win_rate"] == 0 and m["ci95"][0] == 0 and m["ci95"][1] > 0.5  # Wilson: not [0, 0]

    files = [study_votes("mascot", "zero-shot", 5), study_votes("zero-shot", "sft", 4), study_votes("mascot", "sft", 6)]
    r = mascot(
        "arena-report", "--votes", *map(str, files), "--bootstrap", "300", "--output-dir", str(tmp_path / "rep3")
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "rep3/arena_report.json").read_text())
    assert rep["num_votes"] == 18 and rep["duplicates_dropped"] == 6
    bt = rep["bradley_terry"]["ratings"]
    assert (
        set(bt) == {"mascot", "sft", "zero-shot"}
        and bt["mascot"]["rating"] > bt["zero-shot"]["rating"] > bt["sft"]["rating"]
    )
    assert all(x["ci95"][0] < x["rating"] < x["ci95"][1] for x in bt.values())
    assert "Bradley-Terry ratings" in r.stdout and "3 studies: 18 votes" in r.stdout
