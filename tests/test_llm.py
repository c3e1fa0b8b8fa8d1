"The LLM layer against a real OpenAI-compatible server and the real embedded model."

import asyncio, json
import pytest
from mascot.core.runtime import RunDir
from mascot.llm.types import ChatRequest, ModelNotFound, BackendUnavailable
from mascot.llm.openai import OpenAIBackend
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.llm.routing import EndpointConfig, route_roles
from mascot.llm.client import LLMClient
from mascot.llm.embedded_weights import EMBEDDED_DEFAULT

HELLO = [{"role": "user", "content": "Say hello to a friend in one short sentence."}]


def test_openai_backend_chat_and_models(openai_server):
    async def go():
        b = OpenAIBackend(openai_server["url"], max_retries=1)
        test_models = await b.served_models()
        assert openai_server["model"] in test_models
        r = await b.chat(ChatRequest(HELLO, max_tokens=16, seed=0))
        assert r.text.strip() and r.completion_tokens > 0 and r.prompt_tokens > 0
        assert r.backend == f"openai:{openai_server['url']}" and r.latency_s > 0
        # the server ignores n: the backend asks for the missing samples itself (sampled; greedy samples are asked for once)
        r3 = await b.chat(ChatRequest(HELLO, max_tokens=8, n=3, seed=1, temperature=0.7))
        assert len(r3.texts) == 3
        greedy = await b.chat(ChatRequest(HELLO, max_tokens=8, n=2))
        assert len(greedy.texts) == 2 and greedy.texts[0] == greedy.texts[1]
        assert (await b.describe_model(openai_server["model"]))[
            "adapter"
        ] is None  # no parent listed: the id is its own base
        await b.aclose()

    asyncio.run(go())


def test_openai_backend_concurrent_requests_all_answered(openai_server):
    async def go():
        b = OpenAIBackend(openai_server["url"], max_concurrency=8)
        rs = await asyncio.gather(
            *[
                b.chat(
                    ChatRequest([{"role": "user", "content": f"Give me a word about the number {i}."}], max_tokens=8)
                )
                for i in range(8)
            ]
        )
        await b.aclose()
        return rs

    rs = asyncio.run(go())
    assert len(rs) == 8 and all(r.completion_tokens > 0 for r in rs)


def test_model_not_served_names_model_and_url(openai_server):
    async def go():
        client = LLMClient(
            EndpointConfig(
                vllm_server_url=openai_server["url"],
                agent_model="mascot-speaker",
                directive_model=openai_server["model"],
                user_model=openai_server["model"],
            )
        )
        with pytest.raises(
            ModelNotFound, match=r"role speaker: model 'mascot-speaker' is not served at http://127\.0\.0\.1:\d+/v1"
        ):
            await client.check()
        await client.aclose()

    asyncio.run(go())


def test_unreachable_url_after_retries():
    async def go():
        b = OpenAIBackend("http://127.0.0.1:9/v1", max_retries=2, timeout=2)
        with pytest.raises(BackendUnavailable, match="127.0.0.1:9/v1 unreachable after 2 retries"):
            await b.chat(ChatRequest(HELLO))

    asyncio.run(go())


def test_roles_mix_server_and_embedded_with_trace(openai_server, tmp_path):
    cfg = EndpointConfig(
        speaker_server_url=openai_server["url"], agent_model=openai_server["model"], trace_role_calls=True
    )
    run = RunDir(tmp_path / "run", cfg)

    async def go():
        c = LLMClient(cfg, run=run)
        await c.check()
        await asyncio.gather(c.chat("speaker", HELLO, max_tokens=6), c.chat("director", HELLO, max_tokens=6))
        await c.aclose()

    asyncio.run(go())
    trace = {t["role"]: t for t in map(json.loads, open(tmp_path / "run" / "role_call_trace.jsonl"))}
    assert trace["speaker"]["backend"].startswith("openai:") and trace["director"]["backend"] == "embedded"
    assert trace["director"]["model"] == EMBEDDED_DEFAULT


def test_embedded_batched_equals_unbatched_greedy():
    emb = EmbeddedBackend(dtype="float32")  # exact in fp32; bf16 rounding may depend on the batch's padding
    asks = [
        [{"role": "user", "content": q}]
        for q in (
            "Tell me about rain.",
            "What helps when I'm anxious?",
            "One word for joy?",
            "Describe a quiet morning.",
            "Why do people argue?",
            "Give me a tip for sleep.",
        )
    ]

    async def go():
        single = [(await emb.chat(ChatRequest(m, max_tokens=32))).text for m in asks]
        emb.batches.clear()
        batched = [r.text for r in await asyncio.gather(*[emb.chat(ChatRequest(m, max_tokens=32)) for m in asks])]
        return single, batched

    single, batched = asyncio.run(go())
    assert batched == single
    assert emb.batches == [len(asks)]


def test_routing_rules_never_default_a_url():
    r = route_roles(EndpointConfig(vllm_server_url="http://a/v1"))
    assert [r[x].url for x in ("director", "speaker", "user", "judge")] == ["http://a/v1"] * 3 + [None]
    r = route_roles(EndpointConfig(judge_server_url="http://j/v1"))
    assert [r[x].backend for x in ("director", "speaker", "user", "judge")] == ["embedded"] * 3 + ["openai"]


@pytest.mark.served
def test_each_endpoint_sends_its_own_key_and_a_refusal_is_not_retried(monkeypatch):
    from fake_openai_server import FakeOpenAIServer
    from mascot.core.config import ConfigError
    from mascot.llm.types import EndpointRefused

    monkeypatch.setenv("MASCOT_API_KEY", "role-key-123456")
    monkeypatch.setenv("JUDGE_KEY", "judge-key-456789")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-sent-to-these-servers")
    with FakeOpenAIServer({}) as roles, FakeOpenAIServer({}) as judge:
        cfg = EndpointConfig(
            vllm_server_url=roles.url,
            judge_server_url=judge.url,
            model_name="fake-model",
            judge="fake-model",
            judge_api_key_env="JUDGE_KEY",
        )

        async def go():
            c = LLMClient(cfg)
            await c.check()
            await c.chat("speaker", HELLO)
            await c.chat("judge", HELLO)
            await c.aclose()

        asyncio.run(go())
        assert set(roles.auth) == {"Bearer role-key-123456"} and set(judge.auth) == {"Bearer judge-key-456789"}
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR is not set"):
        OpenAIBackend("http://127.0.0.1:9/v1", key_env="NO_SUCH_KEY_VAR")
    with FakeOpenAIServer({}, refuse=403, refuse_on=("chat",)) as srv:

        async def refused():
            b = OpenAIBackend(srv.url, max_retries=3, key_env="JUDGE_KEY")
            with pytest.raises(EndpointRefused, match=r"refused the key in JUDGE_KEY: HTTP 403, not retried") as e:
                await b.chat(ChatRequest(HELLO, model="fake-model"))
            await b.aclose()
            assert "judge-key" not in str(e.value)

        asyncio.run(refused())
        assert srv.auth["Bearer judge-key-456789"] == 2  # the model list, then one chat request: not retried
