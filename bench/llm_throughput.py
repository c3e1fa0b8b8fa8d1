"""Throughput of the LLM layer: aggregate output tokens/s.

Embedded backend at concurrency 1, 8, 16 vs raw batched `model.generate` at the same batch size; the OpenAI backend against a
real `transformers serve` on 127.0.0.1, sequential vs concurrent. Writes bench/results/llm_throughput.json.
With --vllm: embedded backend vs a vLLM server (`mascot serve`, .venv-vllm from `make vllm`) at concurrency 1 and 16, on the base model
and on a LoRA alias (the same random adapter on both), both in fp32, in one run; writes bench/results/llm_throughput_vllm.json.

    python bench/llm_throughput.py [--new-tokens 64] [--requests 16] [--no-server]
    python bench/llm_throughput.py --vllm [--requests 32] [--new-tokens 64]
"""

import argparse, asyncio, json, os, platform, socket, subprocess, sys, time, shutil

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
import torch
from mascot.llm.types import ChatRequest
from mascot.llm.embedded_backend import EmbeddedBackend
from mascot.llm.openai import OpenAIBackend
from mascot.llm.embedded_weights import convert_smollm2

PROMPTS = [
    "I moved to a new city and I feel lonely.",
    "My exam is tomorrow and I can't focus.",
    "I lost my job last week.",
    "My best friend stopped talking to me.",
    "I got a promotion but feel like a fraud.",
    "My dog is sick.",
    "I argued with my sister.",
    "I can't sleep at night.",
    "I'm nervous about a first date.",
    "I failed my driving test.",
    "My team ignored my idea.",
    "I feel stuck in my career.",
    "I miss my family.",
    "I'm proud of finishing a marathon.",
    "I broke my phone.",
    "My landlord raised the rent.",
]


def msgs(i):
    return [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]


async def embedded_rate(emb, concurrency, n_requests, new_tokens):
    sem = asyncio.Semaphore(concurrency)

    async def one(i):
        async with sem:
            return await emb.chat(ChatRequest(msgs(i), max_tokens=new_tokens))

    t = time.perf_counter()
    rs = await asyncio.gather(*[one(i) for i in range(n_requests)])
    dt = time.perf_counter() - t
    return sum(r.completion_tokens for r in rs) / dt


def raw_rate(emb, batch, n_requests, new_tokens):
    tok, model = emb.tokenizer, emb.model
    total, t = 0, time.perf_counter()
    for start in range(0, n_requests, batch):
        texts = [
            tok.apply_chat_template(msgs(i), tokenize=False, add_generation_prompt=True)
            for i in range(start, start + batch)
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        new = out[:, enc["input_ids"].shape[1] :]
        for row in new.tolist():  # count up to the first end token, as the backend does
            total += next((i for i, x in enumerate(row) if x == tok.eos_token_id), len(row))
    return total / (time.perf_counter() - t)


async def server_rates(url, model, n_requests, new_tokens):
    b = OpenAIBackend(url, max_concurrency=n_requests)
    await b.chat(ChatRequest(msgs(0), model=model, max_tokens=4))  # warm-up (and fixes the server's greedy mode)
    t = time.perf_counter()
    seq = [await b.chat(ChatRequest(msgs(i), model=model, max_tokens=new_tokens)) for i in range(n_requests)]
    seq_rate = sum(r.completion_tokens for r in seq) / (time.perf_counter() - t)
    t = time.perf_counter()
    con = await asyncio.gather(
        *[b.chat(ChatRequest(msgs(i), model=model, max_tokens=new_tokens)) for i in range(n_requests)]
    )
    con_rate = sum(r.completion_tokens for r in con) / (time.perf_counter() - t)
    await b.aclose()
    return seq_rate, con_rate


def start_server(path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
    proc = subprocess.Popen(
        [
            exe,
            "serve",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--continuous-batching",
            "--cb-num-blocks",
            "64",
            "--cb-max-batch-tokens",
            "512",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    import urllib.request

    for _ in range(180):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            return proc, f"http://127.0.0.1:{port}/v1"
        except Exception:
            time.sleep(1)
    proc.kill()
    raise RuntimeError("server did not start")


async def rate(backend, model, concurrency, n_requests, new_tokens):
    "Aggregate completion tokens/s of `n_requests` greedy requests on `model`, at most `concurrency` in flight."
    sem = asyncio.Semaphore(concurrency)

    async def one(i):
        async with sem:
            return await backend.chat(ChatRequest(msgs(i), model=model, max_tokens=new_tokens))

    t = time.perf_counter()
    rs = await asyncio.gather(*[one(i) for i in range(n_requests)])
    dt = time.perf_counter() - t
    return sum(r.completion_tokens for r in rs) / dt


def start_vllm(adapter, port):
    "`mascot serve` of the embedded alias with one LoRA alias, fp32; returns the process and the URL once /v1/models answers."
    log = open(Path("bench/results") / "llm_throughput_vllm.serve.log", "w")
    cmd = [
        sys.executable,
        "-m",
        "mascot.pipeline.serve",
        "--model",
        "smollm2-135m-instruct",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--cpu-kvcache-space",
        "1",
        "--lora-modules",
        f"bench-lora={adapter}",
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    import urllib.request

    for _ in range(900):
        if proc.poll() is not None:
            raise RuntimeError(f"mascot serve exited; see {log.name}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
            return proc, f"http://127.0.0.1:{port}/v1"
        except Exception:
            time.sleep(1)
    proc.terminate()
    raise RuntimeError("vLLM did not start in 900 s")


def vllm_bench(a):
    "Embedded vs vLLM, base and LoRA alias, concurrency 1 and 16, in one run (the same prompts, greedy, fp32)."
    import tempfile
    from mascot.llm.embedded_backend import make_random_lora
    from mascot.llm.embedded_weights import EMBEDDED_DEFAULT
    from mascot.pipeline.serve import vllm_python

    if vllm_python() is None:
        raise SystemExit("--vllm needs .venv-vllm: run `make vllm`")
    adapter = make_random_lora(EMBEDDED_DEFAULT, Path(tempfile.mkdtemp()) / "bench_lora", r=8, seed=0, scale=0.05)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "load_avg_at_start": os.getloadavg(),
        },
        "new_tokens": a.new_tokens,
        "requests": {"1": a.requests // 4, "16": a.requests},
        "dtype": "float32",
        "note": "one run on a shared 2-core machine: compare ratios within this file only",
        "tok_per_s": {},
    }
    # embedded and vLLM measured back to back per cell (both loaded, one idle while the other runs), so the machine's drifting load
    # biases neither side
    proc, url = start_vllm(adapter, port)
    emb = EmbeddedBackend(dtype="float32", adapters={"bench-lora": str(adapter)}).load()

    async def interleaved():
        b = OpenAIBackend(url, max_concurrency=16)
        sides = {"embedded": (emb, None), "vllm": (b, EMBEDDED_DEFAULT)}
        try:
            for backend, base in sides.values():  # warm-up
                await rate(backend, base, 4, 4, 8)
                await rate(backend, "bench-lora", 4, 4, 8)
            for label in ("base", "lora"):
                for c in (1, 16):
                    n = a.requests // 4 if c == 1 else a.requests
                    for name, (backend, base) in sides.items():
                        r = round(await rate(backend, base if label == "base" else "bench-lora", c, n, a.new_tokens), 2)
                        res["tok_per_s"][f"{name}/{label}/c{c}"] = r
                        print(
                            f"{name:>8} {label:>4} concurrency {c:>2}: {r:7.1f} tok/s   (load {os.getloadavg()[0]:.1f})",
                            flush=True,
                        )
        finally:
            await b.aclose()

    try:
        asyncio.run(interleaved())
    finally:
        proc.terminate()
        proc.wait(120)
    t = res["tok_per_s"]
    res["ratio_vllm_vs_embedded"] = {
        k.split("/", 1)[1]: round(t[k] / t["embedded/" + k.split("/", 1)[1]], 3) for k in t if k.startswith("vllm/")
    }
    res["machine"]["load_avg_at_end"] = os.getloadavg()
    out = Path("bench/results/llm_throughput_vllm.json")
    out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res["ratio_vllm_vs_embedded"], indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--out", default="bench/results/llm_throughput.json")
    ap.add_argument(
        "--vllm", action="store_true", help="embedded vs vLLM (base and LoRA alias, concurrency 1 and 16) instead"
    )
    a = ap.parse_args()
    if a.vllm:
        return vllm_bench(a)
    emb = EmbeddedBackend().load()
    asyncio.run(embedded_rate(emb, 4, 4, 8))  # warm-up
    res = {
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "new_tokens": a.new_tokens,
        "requests": a.requests,
        "embedded": {},
        "raw_generate": {},
    }
    for c in (1, 8, 16):
        res["embedded"][c] = round(asyncio.run(embedded_rate(emb, c, a.requests, a.new_tokens)), 2)
        res["raw_generate"][c] = round(raw_rate(emb, c, a.requests, a.new_tokens), 2)
        print(
            f"concurrency {c:>2}: embedded {res['embedded'][c]:7.1f} tok/s   raw generate batch {c}: {res['raw_generate'][c]:7.1f} tok/s",
            flush=True,
        )
    res["ratio_embedded16_vs_raw16"] = round(res["embedded"][16] / res["raw_generate"][16], 3)
    res["ratio_embedded16_vs_embedded1"] = round(res["embedded"][16] / res["embedded"][1], 3)
    if not a.no_server:
        proc, url = start_server(convert_smollm2())
        try:
            seq, con = asyncio.run(server_rates(url, str(convert_smollm2()), a.requests, a.new_tokens))
            res["openai_transformers_serve"] = {
                "sequential": round(seq, 2),
                "concurrent": round(con, 2),
                "ratio": round(con / seq, 3),
            }
            print(f"transformers serve: sequential {seq:.1f} tok/s, {a.requests} concurrent {con:.1f} tok/s")
        finally:
            proc.terminate()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res.items() if k.startswith("ratio")}, indent=1))


if __name__ == "__main__":
    main()
