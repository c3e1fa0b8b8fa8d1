"""Throughput of the LLM layer: aggregate output tokens/s.

Embedded backend at concurrency 1, 8, 16 vs raw batched `model.generate` at the same batch size; the OpenAI backend against a
real `transformers serve` on 127.0.0.1, sequential vs concurrent. Writes bench/results/llm_throughput.json.

    python bench/llm_throughput.py [--new-tokens 64] [--requests 16] [--no-server]
"""
import argparse, asyncio, json, os, platform, socket, subprocess, sys, time, shutil
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path
import torch
from mascot.llm import ChatRequest, EmbeddedBackend, OpenAIBackend, convert_smollm2

PROMPTS = ["I moved to a new city and I feel lonely.", "My exam is tomorrow and I can't focus.", "I lost my job last week.",
           "My best friend stopped talking to me.", "I got a promotion but feel like a fraud.", "My dog is sick.",
           "I argued with my sister.", "I can't sleep at night.", "I'm nervous about a first date.", "I failed my driving test.",
           "My team ignored my idea.", "I feel stuck in my career.", "I miss my family.", "I'm proud of finishing a marathon.",
           "I broke my phone.", "My landlord raised the rent."]

def msgs(i): return [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]

async def embedded_rate(emb, concurrency, n_requests, new_tokens):
    sem = asyncio.Semaphore(concurrency)
    async def one(i):
        async with sem: return await emb.chat(ChatRequest(msgs(i), max_tokens=new_tokens))
    t = time.perf_counter(); rs = await asyncio.gather(*[one(i) for i in range(n_requests)]); dt = time.perf_counter() - t
    return sum(r.completion_tokens for r in rs) / dt

def raw_rate(emb, batch, n_requests, new_tokens):
    tok, model = emb.tokenizer, emb.model
    total, t = 0, time.perf_counter()
    for start in range(0, n_requests, batch):
        texts = [tok.apply_chat_template(msgs(i), tokenize=False, add_generation_prompt=True) for i in range(start, start + batch)]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        new = out[:, enc["input_ids"].shape[1]:]
        for row in new.tolist():  # count up to the first end token, as the backend does
            total += next((i for i, x in enumerate(row) if x == tok.eos_token_id), len(row))
    return total / (time.perf_counter() - t)

async def server_rates(url, model, n_requests, new_tokens):
    b = OpenAIBackend(url, max_concurrency=n_requests)
    await b.chat(ChatRequest(msgs(0), model=model, max_tokens=4))  # warm-up (and fixes the server's greedy mode)
    t = time.perf_counter(); seq = [await b.chat(ChatRequest(msgs(i), model=model, max_tokens=new_tokens)) for i in range(n_requests)]
    seq_rate = sum(r.completion_tokens for r in seq) / (time.perf_counter() - t)
    t = time.perf_counter(); con = await asyncio.gather(*[b.chat(ChatRequest(msgs(i), model=model, max_tokens=new_tokens)) for i in range(n_requests)])
    con_rate = sum(r.completion_tokens for r in con) / (time.perf_counter() - t)
    await b.aclose()
    return seq_rate, con_rate

def start_server(path):
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or "transformers"
    proc = subprocess.Popen([exe, "serve", str(path), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--continuous-batching",
                             "--cb-num-blocks", "64", "--cb-max-batch-tokens", "512"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    import urllib.request
    for _ in range(180):
        try: urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2); return proc, f"http://127.0.0.1:{port}/v1"
        except Exception: time.sleep(1)
    proc.kill(); raise RuntimeError("server did not start")

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=64); ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--no-server", action="store_true"); ap.add_argument("--out", default="bench/results/llm_throughput.json")
    a = ap.parse_args()
    emb = EmbeddedBackend().load()
    asyncio.run(embedded_rate(emb, 4, 4, 8))  # warm-up
    res = {"machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__},
           "new_tokens": a.new_tokens, "requests": a.requests, "embedded": {}, "raw_generate": {}}
    for c in (1, 8, 16):
        res["embedded"][c] = round(asyncio.run(embedded_rate(emb, c, a.requests, a.new_tokens)), 2)
        res["raw_generate"][c] = round(raw_rate(emb, c, a.requests, a.new_tokens), 2)
        print(f"concurrency {c:>2}: embedded {res['embedded'][c]:7.1f} tok/s   raw generate batch {c}: {res['raw_generate'][c]:7.1f} tok/s", flush=True)
    res["ratio_embedded16_vs_raw16"] = round(res["embedded"][16] / res["raw_generate"][16], 3)
    res["ratio_embedded16_vs_embedded1"] = round(res["embedded"][16] / res["embedded"][1], 3)
    if not a.no_server:
        proc, url = start_server(convert_smollm2())
        try:
            seq, con = asyncio.run(server_rates(url, str(convert_smollm2()), a.requests, a.new_tokens))
            res["openai_transformers_serve"] = {"sequential": round(seq, 2), "concurrent": round(con, 2), "ratio": round(con / seq, 3)}
            print(f"transformers serve: sequential {seq:.1f} tok/s, {a.requests} concurrent {con:.1f} tok/s")
        finally: proc.terminate()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(json.dumps({k: v for k, v in res.items() if k.startswith("ratio")}, indent=1))

if __name__ == "__main__": main()
