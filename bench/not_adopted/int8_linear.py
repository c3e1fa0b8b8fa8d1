"""Fewer bytes per weight for the embedded model's decode on a CPU without bf16 units: three int8 routes against fp32; measured, not adopted.

A decode step of a small batch reads every weight once, so on 2 AVX2 cores it costs about as much at 6 rows as at 1 (#17). int8 weights
read a quarter of the bytes. This script measures, under AVX2 kernels (torch, oneDNN and MKL capped as on a CPU without AVX-512 or bf16):

* shapes: the model's MLP projection (576 -> 1536) and its output layer (576 -> 49,152) at 1, 6 and 24 rows, fp32 `F.linear` against
  `aten._weight_int8pack_mm` (int8 weights, fp32 activations), `torch._int_mm` with per-row activation scales, and PyTorch's dynamic
  quantized Linear (fbgemm: int8 weights, activations quantized per tensor at run time);
* model: SmolLM2-135M with every Linear dynamically quantized against fp32, 6 speaker-sized greedy requests, 40 new tokens: decode
  milliseconds per step, and how many texts match fp32;
* batch dependence: the first request alone and inside the batch of 6, greedy, for fp32 and for the dynamic int8 model.

    python bench/not_adopted/int8_linear.py [--out bench/results/int8_linear-avx2.json]

Why not adopted (one run, 2026-12-03): the two routes that keep each row independent are slower than fp32 on AVX2; fbgemm's dynamic
Linear is 3-10x faster per layer, but it quantizes a whole batch's activations with one scale, so a row's reply depends on the rows it
was batched with (the `batch_dependence` entry), and the package's replies must not change with `--max-concurrency`. It also changes every
reply relative to fp32 (`texts_equal_fp32`). A per-row dynamic int8 kernel that is fast on AVX2 would change this.
"""

import argparse, json, os, sys, time
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # bench/: the AVX2 caps, and static_cache.py's speaker-sized requests
from pipeline_profile import AVX2_ENV  # imports no torch

os.environ.update(AVX2_ENV)  # before torch is imported: the kernels are chosen then
import torch


def ms(f, n: int) -> float:
    f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e3


def int_mm_linear(x, wq_t, w_scale):
    "int8 x int8 -> int32 with each row's own activation scale (batch-independent), then back to fp32."
    s = x.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 127
    return torch._int_mm((x / s).round_().to(torch.int8), wq_t).float() * s * w_scale


def shapes() -> list[dict]:
    torch.manual_seed(0)
    rows = []
    with torch.inference_mode():
        for m in (1, 6, 24):
            for n, k in ((1536, 576), (49152, 576)):
                lin = torch.nn.Linear(k, n, bias=False)
                w, x = lin.weight.detach(), torch.randn(m, k)
                ws = w.abs().amax(1) / 127
                wq = (w / ws[:, None]).round().to(torch.int8)
                wq_t = wq.t().contiguous()
                dyn = torch.ao.quantization.quantize_dynamic(
                    torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8
                )
                reps = 20 if n > 10000 else 100
                ref = x @ w.T
                row = {"rows": m, "out": n, "in": k, "fp32_ms": ms(lambda: x @ w.T, reps)}
                for name, f in {
                    "int8pack_ms": lambda: torch.ops.aten._weight_int8pack_mm(x, wq, ws),
                    "int_mm_per_row_ms": lambda: int_mm_linear(x, wq_t, ws),
                    "fbgemm_dynamic_ms": lambda: dyn(x),
                }.items():
                    row[name] = ms(f, reps)
                    row[name.replace("_ms", "_max_abs_err")] = float((f() - ref).abs().max())
                rows.append(row)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    return rows


def model_decode() -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from mascot.llm.embedded_weights import EMBEDDED_DEFAULT, resolve_model_path
    from static_cache import speaker_requests

    path = resolve_model_path(EMBEDDED_DEFAULT)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    fp32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    int8 = torch.ao.quantization.quantize_dynamic(
        AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), {torch.nn.Linear}, dtype=torch.qint8
    )
    prompts = [
        tok.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True) for r in speaker_requests(6)
    ]

    def run(model, texts, new):
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        t = time.perf_counter()
        out = model.generate(
            **enc, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id
        )
        return time.perf_counter() - t, tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    res = {"requests": len(prompts), "new_tokens": 40}
    with torch.inference_mode():
        for name, model in (("fp32", fp32), ("int8_dynamic", int8)):
            run(model, prompts, 2)  # warm-up
            prefill, _ = run(model, prompts, 1)
            total, texts = run(model, prompts, 41)
            _, alone = run(model, prompts[:1], 41)
            res[name] = {
                "decode_ms_per_step": (total - prefill) / 40 * 1e3,
                "texts": texts,
                "first_alone_equals_in_batch": alone[0] == texts[0],
            }
            print(name, round(res[name]["decode_ms_per_step"], 1), "ms/step", flush=True)
    res["texts_equal_fp32"] = sum(a == b for a, b in zip(res["fp32"]["texts"], res["int8_dynamic"]["texts"]))
    res["batch_dependence"] = {k: not res[k]["first_alone_equals_in_batch"] for k in ("fp32", "int8_dynamic")}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/int8_linear-avx2.json")
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    out = {"isa": "avx2 (capped)", "cpus": os.cpu_count(), "shapes": shapes(), "model": model_decode()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
