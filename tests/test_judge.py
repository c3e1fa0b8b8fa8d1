"`mascot judge`: metrics end to end with a scripted judge, logprob-weighted scores, failures, and the real embedded SmolLM2 judge."

import json, math, statistics, subprocess, sys
from pathlib import Path
import pytest
from mascot.core.store import read_jsonl
from mascot.llm.types import ChatBackend, ChatRequest, ChatResponse, TokenLogprob
from mascot.judging.rubrics import RUBRICS, get_rubric, judge_line
from mascot.judging.judgements import JudgeParseError, parse_judgement, score_distribution, to_100
from mascot.judging.pairwise import krippendorff_alpha
from mascot.judging.panel import JudgeConfig, judge_file

NAMES = list(dict.fromkeys(c.name for r in RUBRICS.values() for c in r.criteria))


class ScriptedJudge(ChatBackend):
    """A deterministic judge: the score of the first key found in the judged item (the last message), on every criterion.
    `None` answers prose that does not parse. With `p` < 1 and logprobs asked, each score token holds `p` and the next lower score 1 - p."""

    kind = "scripted"

    def __init__(self, scores: dict, p: float = 1.0):
        self.scores, self.p, self.calls = scores, p, 0

    async def check_model(self, model):
        return model or "scripted"

    async def chat(self, req: ChatRequest) -> ChatResponse:
        self.calls += 1
        score = next(v for k, v in self.scores.items() if k in req.messages[-1]["content"])
        text = (
            "\n".join(judge_line(n, "scripted", score) for n in NAMES)
            if score
            else "Such a nice conversation, well done everyone."
        )
        tokens = [TokenLogprob(ch, 0.0) for ch in text]  # one character a token, like a tokenizer that splits digits
        for t in tokens:
            if t.token in "23456789" and self.p < 1:
                t.logprob, t.top = (
                    math.log(self.p),
                    {t.token: math.log(self.p), str(int(t.token) - 1): math.log(1 - self.p)},
                )
        return ChatResponse(
            [text], ["stop"], 1, len(tokens), req.model, self.kind, 0.0, [tokens] if req.logprobs else None
        )


def conversation(cid, situation, agents, system="mascot", dataset="ED", **meta):
    turns = [{"turn_idx": 0, "round_id": 0, "turn_type": "user", "agent_name": "User", "response": situation}]
    turns += [
        {
            "turn_idx": i + 1,
            "round_id": i,
            "directive": {"agent_name": a, "action": "respond", "tone": "warm"},
            "directive_output": "{}",
            "agent_name": a,
            "response": f"{a} answers about it.",
        }
        for i, a in enumerate(agents)
    ]
    return {
        "conv_id": cid,
        "turns": turns,
        "agents_spoken": {a: agents.count(a) for a in agents},
        "metadata": {
            "schema_version": "1.0",
            "system": system,
            "dataset": dataset,
            "persona_set": "default",
            "rubric_version": "paper_v1",
            **meta,
        },
    }


@pytest.fixture
def convs(tmp_path) -> Path:
    path = tmp_path / "hand_ED.jsonl"
    path.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                conversation(
                    "c1", "I failed my exam.", ["The Anchor", "The Catalyst", "The Anchor"], valence="negative"
                ),
                conversation("c2", "I got the job!", ["The Beacon", "The Anchor"], valence="positive"),
                conversation(
                    "c3", "My dog is sick.", ["Supporter", "Supporter"], system="zero-shot", valence="negative"
                ),
            ]
        )
    )
    return path


SCRIPT = {
    "Reply to rate (The Anchor)": 9,
    "Reply to rate (The Catalyst)": 6,
    "Reply to rate (The Beacon)": 7,
    "Reply to rate (Supporter)": 4,
    "I failed my exam": 8,
    "I got the job": 5,
    "My dog is sick": 3,
}
S100 = {s: (s - 1) / 9 * 100 for s in range(1, 11)}


def load(path):
    return json.loads(Path(path).read_text())


def test_metrics_end_to_end(convs):
    paths = judge_file(
        JudgeConfig(provider="embedded", input_file=str(convs), progress=False), embedded=ScriptedJudge(SCRIPT)
    )
    assert set(paths) == {"persona", "collective"} and all(p.parent == convs.parent for p in paths.values())
    m = load(paths["persona"])
    c1, c2, c3 = statistics.fmean([S100[9], S100[6], S100[9]]), statistics.fmean([S100[7], S100[9]]), S100[4]
    for crit in ("Emotion", "Empathy", "Consistency", "Relevance", "Contribution", "Overall"):
        assert m["overall"][crit] == {
            "mean": round(statistics.fmean([c1, c2, c3]), 2),
            "std": round(statistics.stdev([c1, c2, c3]), 2),
            "n": 3,
        }
    assert m["groups"]["valence"]["negative"]["Overall"] == {
        "mean": round((c1 + c3) / 2, 2),
        "std": round(statistics.stdev([c1, c3]), 2),
        "n": 2,
    }
    assert m["groups"]["valence"]["positive"]["Overall"] == {"mean": round(c2, 2), "std": 0.0, "n": 1}
    assert m["groups"]["system"]["zero-shot"]["Overall"]["mean"] == round(S100[4], 2)
    assert m["groups"]["agent"]["The Anchor"]["Empathy"] == {"mean": round(S100[9], 2), "std": 0.0, "n": 2}
    assert (m["num_records"], m["num_scored"], m["num_items"], m["num_annotation_failures"], m["rubrics"]) == (
        3,
        3,
        7,
        0,
        ["persona/support"],
    )
    lines = {l["conv_id"]: l for l in read_jsonl(convs.parent / "scores_persona_hand_ED.jsonl")}
    assert lines["c1"]["agents"]["The Anchor"]["num_turns"] == 2 and lines["c1"]["agents"]["The Catalyst"][
        "Overall"
    ] == round(S100[6], 4)
    assert [i["turn_idx"] for i in lines["c1"]["items"]] == [1, 2, 3] and lines["c3"]["groups"] == {
        "system": "zero-shot",
        "valence": "negative",
    }
    col = load(paths["collective"])
    assert col["overall"]["Fidelity"] == {
        "mean": round(statistics.fmean([S100[8], S100[5], S100[3]]), 2),
        "std": round(statistics.stdev([S100[8], S100[5], S100[3]]), 2),
        "n": 3,
    }
    summary = load(next(convs.parent.glob("judge_hand_ED.runs/*/run_summary.json")))
    assert summary["status"] == "completed" and summary["roles"]["judge"]["calls"] == 10


def test_several_judges_agreement(convs, tmp_path):
    class TwoJudges(ScriptedJudge):  # judge "b" gives the exam conversation 2 instead of 8
        async def chat(self, req):
            r = await super().chat(req)
            if req.model == "b" and "I failed my exam" in req.messages[-1]["content"]:
                r.texts = [r.text.replace(": 8", ": 2")]
            return r

    paths = judge_file(
        JudgeConfig(
            provider="embedded",
            input_file=str(convs),
            judges=["b"],
            rubric="collective",
            output_dir=str(tmp_path / "out"),
            progress=False,
        ),
        embedded=TwoJudges(SCRIPT),
    )
    m = load(paths["collective"])
    want = krippendorff_alpha([[S100[8], S100[5], S100[3]], [S100[2], S100[5], S100[3]]])
    assert m["judges"][1] == "b" and m["agreement"]["alpha"]["Overall"] == round(want, 4)
    assert m["by_judge"]["b"]["overall"]["Overall"]["mean"] == round(statistics.fmean([S100[2], S100[5], S100[3]]), 2)


def test_weighted_scores_follow_the_top_token_probabilities():
    rubric = get_rubric("persona", "ED")
    text = "\n".join(judge_line(n, "ok", s) for n, s in zip(rubric.names, (8, 10, 1, 5, 2)))
    tokens = [TokenLogprob(ch, 0.0) for ch in text]
    lp = math.log

    def at(digit_pos, top, chosen):  # replace the token at a score position with its alternatives
        tokens[digit_pos] = TokenLogprob(chosen, top[chosen], top)

    pos = [i for i, t in enumerate(tokens) if t.token.isdigit() and text[i - 2 : i] == ": "]
    at(pos[0], {"8": lp(0.5), "9": lp(0.3), "x": lp(0.2)}, "8")  # Emotion: 8 (50%) / 9 (30%) / not a score (dropped)
    at(pos[1], {"1": lp(0.7), "9": lp(0.3)}, "1")  # Empathy: "1" then "0" = 10 ...
    tokens[pos[1] + 1] = TokenLogprob("0", lp(0.6), {"0": lp(0.6), "\n": lp(0.4)})  # ... 60% "0" (10), 40% end (1)
    at(pos[2], {"1": lp(0.9), "2": lp(0.1)}, "1")  # Consistency: "1" then newline (score 1) ...
    tokens[pos[2] + 1] = TokenLogprob(
        "\n", lp(0.75), {"\n": lp(0.75), "0": lp(0.25)}
    )  # ... its 10 reading gets 25% of the "1"
    at(pos[3], {" 5": lp(0.4), "5": lp(0.4), " 6": lp(0.2)}, "5")  # Relevance: spaced and bare tokens merge
    j = parse_judgement(text, rubric, tokens)
    assert j.weighted and j.parsed == {"Emotion": 8, "Empathy": 10, "Consistency": 1, "Relevance": 5, "Contribution": 2}
    assert j.scores["Emotion"] == pytest.approx((8 * 0.5 + 9 * 0.3) / 0.8)
    assert j.scores["Empathy"] == pytest.approx(0.7 * (0.6 * 10 + 0.4 * 1) + 0.3 * 9)
    assert j.scores["Consistency"] == pytest.approx(0.9 * (0.75 * 1 + 0.25 * 10) + 0.1 * 2)
    assert j.scores["Relevance"] == pytest.approx(0.8 * 5 + 0.2 * 6)
    assert j.scores["Contribution"] == 2.0  # all mass on the chosen token
    assert j.scores != {k: float(v) for k, v in j.parsed.items()} and parse_judgement(text, rubric).scores == {
        k: float(v) for k, v in j.parsed.items()
    }
    assert j.to_100()["Overall"] == pytest.approx(to_100(statistics.fmean(j.scores.values())))
    assert score_distribution([TokenLogprob("10", lp(0.8), {"10": lp(0.8), "9": lp(0.2)})], 0) == pytest.approx(
        {9: 0.2, 10: 0.8}
    )  # one-token "10"


def test_weighted_scores_through_the_panel(convs, tmp_path):
    paths = judge_file(
        JudgeConfig(
            provider="embedded",
            input_file=str(convs),
            rubric="collective",
            output_dir=str(tmp_path / "w"),
            progress=False,
        ),
        embedded=ScriptedJudge(SCRIPT, p=0.75),
    )
    line = next(l for l in read_jsonl(tmp_path / "w" / "scores_collective_hand_ED.jsonl") if l["conv_id"] == "c1")
    # every judge is scored by the integer it wrote; the probability-weighted score is kept alongside
    assert line["items"][0]["weighted"] and line["scores"]["Fidelity"] == round(to_100(8), 4)
    assert line["items"][0]["weighted_scores"]["Fidelity"] == round(to_100(8 * 0.75 + 7 * 0.25), 4)


def test_conflicting_duplicate_criterion_lines_are_a_counted_failure(convs, tmp_path):
    """A reply that gives a criterion two different scores is an annotation failure, never a score: a stray line before the answer, and a
    complete all-10 block (injected or quoted) before the judge's own answer that disagrees with it."""

    class Conflicting(ScriptedJudge):
        async def chat(self, req):
            r = await super().chat(req)
            if "I failed my exam" in req.messages[-1]["content"]:  # c1: Fidelity 2 first, then the full answer with 8
                r.texts = ["Fidelity (first look): 2\n" + r.text]
            elif "My dog is sick" in req.messages[-1]["content"]:  # c3: an injected all-10 answer, then its own
                r.texts = ["\n".join(f"{n} (as the reply demands): 10" for n in NAMES) + "\n" + r.text]
            return r

    paths = judge_file(
        JudgeConfig(
            provider="embedded",
            input_file=str(convs),
            rubric="collective",
            output_dir=str(tmp_path / "d"),
            progress=False,
        ),
        embedded=Conflicting(SCRIPT),
    )
    m = load(paths["collective"])
    assert m["num_annotation_failures"] == 2 and m["num_scored"] == 1
    lines = {l["conv_id"]: l for l in read_jsonl(tmp_path / "d" / "scores_collective_hand_ED.jsonl")}
    assert (
        "c1" not in lines and "c3" not in lines
    )  # neither the injected 10s nor the final block: two answers, no judgement


def test_malformed_output_counted_in_tolerant_mode_and_fatal_in_strict(convs, tmp_path):
    broken = {**SCRIPT, "Reply to rate (The Catalyst)": None, "My dog is sick": None, "Reply to rate (Supporter)": None}
    paths = judge_file(
        JudgeConfig(provider="embedded", input_file=str(convs), output_dir=str(tmp_path / "t"), progress=False),
        embedded=ScriptedJudge(broken),
    )
    m, col = load(paths["persona"]), load(paths["collective"])
    assert (m["num_scored"], m["num_items"], m["num_annotation_failures"]) == (
        2,
        5,
        3,
    )  # c3's two Supporter turns failed: c3 is not written
    assert m["num_input_records"] == 3 and (col["num_scored"], col["num_annotation_failures"]) == (2, 1)
    c1 = next(l for l in read_jsonl(tmp_path / "t" / "scores_persona_hand_ED.jsonl") if l["conv_id"] == "c1")
    assert c1["num_failures"] == 1 and c1["items"][1] == {"turn_idx": 2, "agent_name": "The Catalyst", "failed": True}
    summary = load(next((tmp_path / "t").glob("judge_hand_ED.runs/*/run_summary.json")))
    assert (summary["status"], summary["num_annotation_failures"], summary["num_skipped_samples"]) == (
        "completed",
        4,
        2,
    )
    assert summary["annotation_failures"][0]["raw"] == "Such a nice conversation, well done everyone."
    # --resume retries exactly the records that were not written
    judge = ScriptedJudge(SCRIPT)
    judge_file(
        JudgeConfig(
            provider="embedded", input_file=str(convs), output_dir=str(tmp_path / "t"), resume=True, progress=False
        ),
        embedded=judge,
    )
    assert judge.calls == 2 + 1 and load(paths["persona"])["num_scored"] == 3
    with pytest.raises(
        JudgeParseError, match=r"--strict: c\d \(.*raw judge output: 'Such a nice conversation, well done everyone.'"
    ):
        judge_file(
            JudgeConfig(
                provider="embedded", input_file=str(convs), output_dir=str(tmp_path / "s"), strict=True, progress=False
            ),
            embedded=ScriptedJudge(broken),
        )
    summary = load(next((tmp_path / "s").glob("judge_hand_ED.runs/*/run_summary.json")))
    assert summary["status"] == "failed" and "Such a nice conversation" in summary["error"]


def test_legacy_file_without_metadata_uses_the_file_name(tmp_path, caplog):
    rec = conversation("q1", "What was decided about the budget?", ["Critic"], dataset="QMSum")
    del rec["metadata"]
    path = tmp_path / "old_qmsum_run.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    with caplog.at_level("WARNING", logger="mascot.judging.panel"):
        paths = judge_file(
            JudgeConfig(provider="embedded", input_file=str(path), rubric="persona", progress=False),
            embedded=ScriptedJudge({"Critic": 6}),
        )
    assert "using the meeting rubric from the file name" in caplog.text
    m = load(paths["persona"])
    assert m["rubrics"] == ["persona/meeting"] and list(m["overall"]) == [
        "Accuracy",
        "Clarity",
        "Consistency",
        "Relevance",
        "Contribution",
        "Overall",
    ]
    assert m["groups"]["system"] == {"unknown": m["overall"]}


@pytest.mark.integration  # the real model: under make test-fast MASCOT_TINY_MODEL puts a random one in its place
def test_real_embedded_smollm2_judge_through_the_cli(tmp_path):
    "The embedded SmolLM2-135M judge on one short conversation (2 agent turns): the run completes and reports what parsed."
    path = tmp_path / "one_ED.jsonl"
    rec = conversation(
        "real", "I failed my driving test again and I feel useless.", ["The Anchor", "The Catalyst"], valence="negative"
    )
    rec["turns"][1]["response"] = "That sounds really discouraging. Feeling let down after trying so hard makes sense."
    rec["turns"][2]["response"] = "What part of the test felt hardest this time?"
    path.write_text(json.dumps(rec) + "\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mascot.judging.panel",
            "--input-file",
            str(path),
            "--provider",
            "embedded",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "metrics_persona_one_ED.json" in r.stdout and "metrics_collective_one_ED.json" in r.stdout
    failures = sum(
        load(tmp_path / f"metrics_{kind}_one_ED.json")["num_annotation_failures"] for kind in ("persona", "collective")
    )
    print(f"SmolLM2-135M judge: {3 - failures} of 3 judgements parsed")  # 2 persona (one per agent turn) + 1 collective
    assert failures < 3  # observed: 3 of 3 here; 17 of 17 on 5 real `mascot episode` records
    for l in read_jsonl(tmp_path / "scores_persona_one_ED.jsonl"):
        assert all(0 <= v <= 100 for it in l["items"] if "scores" in it for v in it["scores"].values())


def test_openai_compatible_judge_without_logprobs(openai_server, tmp_path):
    "`transformers serve` ignores logprobs: the judge falls back to the integers it wrote (or counts a failure) and the run completes."
    path = tmp_path / "srv_ED.jsonl"
    path.write_text(json.dumps(conversation("srv", "I failed my exam.", ["The Anchor"], valence="negative")) + "\n")
    paths = judge_file(
        JudgeConfig(
            input_file=str(path),
            provider="vllm",
            judge_server_url=openai_server["url"],
            judge=openai_server["model"],
            rubric="collective",
            progress=False,
        )
    )
    m = load(paths["collective"])
    assert m["judge"] == openai_server["model"] and m["num_scored"] + m["num_annotation_failures"] == 1
    for l in read_jsonl(tmp_path / "scores_collective_srv_ED.jsonl"):
        assert l["items"][0]["weighted"] is False


def test_the_cache_misses_when_what_answers_changes(tmp_path, monkeypatch):
    "Thinking on/off, the embedded dtype, new weights under one name, an adapter retrained in place, the server's root, a revision, and the tiny test model vs the real embedded one: each a different cache key."
    import asyncio
    from mascot.judging.cache import JudgeCache, judge_identity
    from mascot.judging.calls import judge_sampling
    from mascot.llm.client import LLMClient
    from mascot.llm.embedded_backend import EmbeddedBackend
    from mascot.llm.routing import EndpointConfig

    sys.path.insert(0, str(Path(__file__).parent))
    from fake_openai_server import FakeOpenAIServer

    def key(client, url=None):
        asyncio.run(client.check())
        sampling = judge_sampling(client, {"temperature": 0.0, "max_tokens": 8}, 20, None)
        ident = judge_identity(client) | (
            {"url": url} if url else {}
        )  # url: as if both servers had been at one address
        return JudgeCache.key(ident, "v1", [{"role": "user", "content": "x"}], sampling)

    model, adapter = tmp_path / "judge-model", tmp_path / "judge-lora"
    for d, f in ((model, "model.safetensors"), (adapter, "adapter_model.safetensors")):
        d.mkdir()
        (d / f).write_bytes(b"v1")
        (d / "config.json").write_text("{}")

    def embedded(dtype="float32", thinking=False, **kw):
        cfg = EndpointConfig(
            model_name=str(model), judge="lora", judge_provider="embedded", enable_thinking=thinking, **kw
        )
        return LLMClient(cfg, embedded=EmbeddedBackend(str(model), adapters={"lora": str(adapter)}, dtype=dtype))

    base = key(embedded())
    assert key(embedded()) == base  # same judge, same request: a hit
    keys = {base, key(embedded(thinking=True)), key(embedded(dtype="bfloat16")), key(embedded(judge_revision="r2"))}
    (adapter / "adapter_model.safetensors").write_bytes(b"v2-retrained")
    keys.add(key(embedded()))
    (model / "model.safetensors").write_bytes(b"v2-new-weights")
    keys.add(key(embedded()))
    assert len(keys) == 6

    served = []
    for root in ("/models/judge-a", "/models/judge-b"):
        with FakeOpenAIServer(model="j", listed=[{"id": "j", "root": root}]) as s:
            served.append(key(LLMClient(EndpointConfig(judge="j", judge_server_url=s.url)), url="http://judge:8000/v1"))
    assert served[0] != served[1]  # same name and URL, other weights behind it

    from mascot.core.runtime import cache_dir

    if (cache_dir() / "models/SmolLM2-135M-Instruct/model.safetensors").exists() and (
        cache_dir() / "models/tiny-random-llama/model.safetensors"
    ).exists():
        monkeypatch.delenv("MASCOT_TINY_MODEL", raising=False)  # make test-fast sets it for the whole session
        real = key(LLMClient(EndpointConfig(judge_provider="embedded"), embedded=EmbeddedBackend(dtype="float32")))
        monkeypatch.setenv("MASCOT_TINY_MODEL", "1")
        assert (
            key(LLMClient(EndpointConfig(judge_provider="embedded"), embedded=EmbeddedBackend(dtype="float32"))) != real
        )
