"""The reference's commands as a new user types them: explicit judges (never defaulted, recorded in run_config.json), and the model a
server serves taken from `/v1/models` when no --model-name is given. Every server here is the fake one of tests/fake_openai_server.py."""

import json, os, subprocess, sys
from pathlib import Path
import pytest
from fake_openai_server import FakeOpenAIServer
from mascot.core.config import ConfigError
from mascot.core.defaults import CPU_MODEL
from mascot.llm.routing import EndpointConfig, route_roles
from mascot.llm.client import LLMClient
from mascot.stage1.candidates import CandidatesConfig, generate_individual, individual_dir
from mascot.judging.evaluator import JudgeConfig

ROOT = Path(__file__).resolve().parents[1]


def mascot(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASCOT_NO_DOTENV": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mascot.apps.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def one_line(r) -> str:
    "A refused command: exit 2 and one line on stderr, no traceback."
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    return lines[0]


# ---------------------------------------------------------------- explicit judges
def test_generate_without_a_judge_choice_is_one_line_naming_the_flags(tmp_path):
    line = one_line(
        mascot(
            "generate",
            "--dataset",
            "ED",
            "--data-path",
            "demo:empathetic_dialogues",
            "--num-samples",
            "1",
            "--output-dir",
            str(tmp_path),
            "--no-progress",
        )
    )
    assert "no judge chosen" in line and "--judge-server-url" in line and "--judge-provider embedded" in line
    assert not any(tmp_path.rglob("candidates.jsonl"))  # stopped before any work


def test_judge_provider_openai_never_defaults_its_url(tmp_path):
    line = one_line(
        mascot("judge", "--input-file", str(tmp_path / "x.jsonl"), "--provider", "openai", "--judge", "gpt-4o")
    )
    assert "--provider openai needs --judge-server-url" in line
    line = one_line(mascot("judge", "--input-file", str(tmp_path / "x.jsonl")))
    assert "no judge chosen" in line and "--provider embedded" in line


def test_in_process_judge_only_when_chosen():
    assert route_roles(EndpointConfig())["judge"].backend == "unset"
    assert route_roles(EndpointConfig(judge_provider="embedded"))["judge"].backend == "embedded"
    with pytest.raises(ConfigError, match="no judge chosen"):  # a client asked for the judge it was never given
        LLMClient(EndpointConfig()).backend("judge")


def test_run_config_records_which_judge_ran_where(tmp_path):
    with FakeOpenAIServer(model="fake-model") as srv:
        plain = srv.url
        url = srv.url.replace("http://", "http://user:hunter2@")  # credentials in a URL never reach run files
        folder = generate_individual(
            CandidatesConfig(
                dataset="ED",
                data_path="demo:empathetic_dialogues",
                split="train",
                num_samples=1,
                num_candidates=2,
                personas=["The Anchor"],
                vllm_server_url=srv.url,
                judge_server_url=url,
                judge="fake-model",
                output_dir=str(tmp_path),
                progress=False,
                max_retries=0,
            )
        )
    cfg = json.loads(next(folder.glob("runs/*/run_config.json")).read_text())
    assert cfg["judge_route"] == {"provider": "vllm", "model": "fake-model", "url": plain, "where": "served"}
    assert "hunter2" not in json.dumps(cfg)
    assert folder.name == "individual_ED_fake-model"  # no --model-name: the served model names the output
    embedded = CandidatesConfig(judge_provider="embedded").resolved()["judge_route"]
    assert embedded == {"provider": "embedded", "model": CPU_MODEL, "url": None, "where": "in-process"}


# ---------------------------------------------------------------- the served model when no --model-name is given
def test_one_served_model_is_used(tmp_path):
    with FakeOpenAIServer(model="Qwen/Qwen3-8B") as srv:
        cfg = CandidatesConfig(dataset="ESConv", vllm_server_url=srv.url, judge_provider="embedded")
        assert cfg.model_name == "Qwen/Qwen3-8B" and individual_dir(cfg).name == "individual_ESConv_Qwen3-8B"
        import asyncio

        client = LLMClient(cfg)
        checked = asyncio.run(client.check())
        assert {r: checked[r] for r in ("director", "speaker", "user")} == dict.fromkeys(
            ("director", "speaker", "user"), "Qwen/Qwen3-8B"
        )


def test_a_served_adapter_stands_on_its_base():
    listed = [{"id": "Qwen/Qwen3-8B"}, {"id": "mascot-speaker", "parent": "Qwen/Qwen3-8B", "root": "/ckpt/speaker"}]
    with FakeOpenAIServer(model="Qwen/Qwen3-8B", listed=listed) as srv:
        assert CandidatesConfig(vllm_server_url=srv.url).model_name == "Qwen/Qwen3-8B"


def test_two_served_models_are_one_error_listing_both():
    with FakeOpenAIServer(model="a", listed=[{"id": "Qwen/Qwen3-8B"}, {"id": "google/gemma-3-27b-it"}]) as srv:
        with pytest.raises(
            ConfigError,
            match=r"serves 2 base models \(Qwen/Qwen3-8B, google/gemma-3-27b-it\): name one with --model-name",
        ):
            CandidatesConfig(vllm_server_url=srv.url)
        assert (
            CandidatesConfig(vllm_server_url=srv.url, model_name="Qwen/Qwen3-8B").model_name == "Qwen/Qwen3-8B"
        )  # naming one is enough


def test_no_url_is_the_embedded_cpu_default():
    cfg = CandidatesConfig(dataset="ED")
    assert cfg.model_name == CPU_MODEL and individual_dir(cfg).name == f"individual_ED_{CPU_MODEL}"
    assert {r.backend for r in route_roles(cfg).values()} == {"embedded", "unset"}


def test_a_judge_url_without_a_judge_model_records_the_served_one():
    with FakeOpenAIServer(model="google/gemma-3-27b-it") as srv:
        url = srv.url
        route = CandidatesConfig(judge_server_url=url).resolved()["judge_route"]
    assert route == {"provider": "vllm", "model": "google/gemma-3-27b-it", "url": url, "where": "served"}
