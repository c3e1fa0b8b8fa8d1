"""A device check (under 10 minutes on a GPU, about 2-3 on a CPU): a tiny random model of the Qwen3 architecture (transformers' `Qwen3Config`,
2 layers, hidden size 64, the embedded SmolLM2's tokenizer with a chat template that reads `enable_thinking`) is built on the device, then
one step of each trainer runs on it through the package's training functions: the reward model (`train_reward_model`), speaker GRPO
(`train_speaker`, scored by that reward model), SFT (`train_sft_on_rows`) and director DPO (`train_director_dpo`). Each check asserts
where the weights sit and in which dtype (bf16 on CUDA), and on CUDA that the step allocated GPU memory. Nothing is downloaded.

    .venv/bin/python scripts/gpu_check.py                  # on a CUDA machine (exit 1 without CUDA)
    .venv/bin/python scripts/gpu_check.py --device cpu     # the same checks on the CPU: a smoke test of the script itself

Prints one line per check and exits 1 if any check fails. The results as JSON go where --output names (a file, or - for stdout); without
it they go into the check's own temporary folder (its path is printed), never into the checkout.

    .venv/bin/python scripts/gpu_check.py --output runs/gpu_check.json   # keep them beside the runs
"""

import argparse, json, os, sys, tempfile, time, traceback
from pathlib import Path


def build_tiny_qwen3(dest: Path, device: str, dtype) -> dict:
    "A 2-layer Qwen3 with random weights, built on `device` in `dtype`, saved with a tokenizer into `dest`."
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
    from mascot.llm.embedded_weights import convert_smollm2

    tok = AutoTokenizer.from_pretrained(convert_smollm2())
    # Qwen3's switch, in a ChatML template: with enable_thinking false the assistant turn opens with an empty think block
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
    )
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    p = next(model.parameters())
    assert p.device.type == device and p.dtype == dtype, (p.device, p.dtype)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    return {
        "architecture": type(model).__name__,
        "parameters": sum(x.numel() for x in model.parameters()),
        "dtype": str(p.dtype),
    }


def synthetic_data(tmp: Path) -> dict[str, Path]:
    "Pairs for the reward model, candidates for GRPO and SFT, directive pairs for DPO: a handful of rows each, made here."
    from mascot.training.pairs import save_pairs
    from mascot.domain.personas import roster_for_dataset

    good = "That sounds really hard. I am here with you; what feels heaviest right now?"
    bad = "ok"
    situations = [f"I lost my job last week and keep thinking about it ({i})." for i in range(8)]
    rm_rows, cand_rows, dpo_rows = [], [], []
    names = [p.name for p in roster_for_dataset("ED").personas]
    for i, s in enumerate(situations):
        prompt = [
            {"role": "system", "content": "You are The Anchor, an emotional validator."},
            {"role": "user", "content": s},
        ]
        rm_rows.append(
            {
                "prompt": prompt,
                "chosen": [{"role": "assistant", "content": good}],
                "rejected": [{"role": "assistant", "content": bad}],
                "score_chosen": 1.0,
                "score_rejected": 0.0,
                "persona": "The Anchor",
                "context_id": f"c{i}",
                "query_id": f"c{i}:0",
            }
        )
        cand_rows.append(
            {
                "prompt": prompt,
                "persona": "The Anchor",
                "context_id": f"c{i}",
                "situation": s,
                "opening": [s],
                "candidates": [{"text": good, "overall": 8.0}, {"text": bad, "overall": 2.0}],
            }
        )
        directive = json.dumps({"agent_name": names[i % len(names)], "action": "validate the feeling", "tone": "warm"})
        dpo_rows.append(
            {
                "prompt": [{"role": "system", "content": "You direct a team."}, {"role": "user", "content": s}],
                "chosen": [{"role": "assistant", "content": directive}],
                "rejected": [{"role": "assistant", "content": "nobody"}],
                "score_chosen": 1.0,
                "score_rejected": 0.0,
                "context_id": f"c{i}",
                "query_id": f"c{i}:0",
            }
        )
    out = {}
    for name, rows in (("pairs", rm_rows), ("directives", dpo_rows)):
        (tmp / name).mkdir()
        save_pairs(rows, tmp / name)
        out[name] = tmp / name
    (tmp / "candidates").mkdir()
    with open(tmp / "candidates" / "candidates.jsonl", "w") as f:
        for r in cand_rows:
            f.write(json.dumps(r) + "\n")
    out["candidates"] = tmp / "candidates"
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument(
        "--output",
        "--out",
        dest="output",
        default=None,
        help="where the results go as JSON: a file, or - for stdout (default: gpu_check.json in the check's temporary folder)",
    )
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    a.out = "-" if a.output == "-" else Path(a.output) if a.output else tmp / "gpu_check.json"

    def write(results: dict) -> None:
        "The results as JSON, where --output said."
        if a.out == "-":
            print(json.dumps(results, indent=2))
        else:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(results, indent=2))

    if a.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the trainers place on the CPU as on a machine without a GPU
    import torch

    results, ok = {"device": a.device, "cuda": torch.cuda.is_available()}, True
    if a.device == "cuda":
        if not torch.cuda.is_available():
            print("no CUDA device here: run with --device cpu for the smoke test")
            write(results)
            return 1
        results["gpu"] = torch.cuda.get_device_name(0)
    from mascot.training.models import training_dtype

    dtype = torch.bfloat16 if a.device == "cuda" else training_dtype()
    model = tmp / "tiny-qwen3"
    t_all = time.time()

    def check(name, fn):
        nonlocal ok
        t = time.time()
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        try:
            results[name] = {"ok": True, **(fn() or {}), "seconds": round(time.time() - t, 1)}
            if a.device == "cuda":
                peak = torch.cuda.max_memory_allocated()
                results[name]["peak_gpu_mb"] = round(peak / 2**20, 1)
                assert peak > 0, f"{name}: nothing was allocated on the GPU"
        except Exception as e:
            ok = False
            results[name] = {
                "ok": False,
                "error": f"{e.__class__.__name__}: {e}",
                "trace": traceback.format_exc()[-2000:],
            }
        print(name, results[name]["ok"], {k: v for k, v in results[name].items() if k != "trace"}, flush=True)
        return results[name]["ok"]

    def placed(m, what: str) -> dict:
        p = next(m.parameters())
        assert p.device.type == a.device, f"{what} on {p.device}, not {a.device}"
        if a.device == "cuda":
            assert p.dtype == torch.bfloat16, f"{what} in {p.dtype}, not bf16"
        return {f"{what}_device": str(p.device), f"{what}_dtype": str(p.dtype)}

    if not check("tiny_qwen3_on_device", lambda: build_tiny_qwen3(model, a.device, dtype)):
        write(results)
        return 1
    data = synthetic_data(tmp)
    steps = {"max_steps": 1, "lora_r": 8, "per_device_train_batch_size": 2, "seed": 0, "dataset": "ED"}

    def placement():
        "The trainers' policy loads in training_dtype (bf16 on CUDA); the in-process backend generates on the device."
        import asyncio
        from mascot.training.models import load_causal_lm
        from mascot.llm.embedded_backend import EmbeddedBackend
        from mascot.llm.types import ChatRequest

        m, _ = load_causal_lm(str(model))
        assert next(m.parameters()).dtype == dtype, (next(m.parameters()).dtype, dtype)
        emb = EmbeddedBackend(str(model), device=a.device).load()
        r = asyncio.run(emb.chat(ChatRequest([{"role": "user", "content": "Say hello."}], max_tokens=4)))
        assert r.completion_tokens > 0
        return {"training_dtype": str(training_dtype()), **placed(emb.model, "backend")}

    check("placement_and_dtype", placement)
    rm_path = {}

    def reward_model():
        from mascot.training.reward_trainer import RewardModelConfig, train_reward_model
        from mascot.training.reward_scorer import RewardModel

        out = train_reward_model(
            RewardModelConfig(
                model_name=str(model),
                data_path=str(data["pairs"]),
                output_dir=str(tmp / "rm"),
                max_length=128,
                holdout_fraction=0.25,
                **steps,
            )
        )
        rm_path["path"] = out
        rm = RewardModel.load(out)
        return {"path": str(out), **placed(rm.model, "scorer")}

    check("reward_model_step", reward_model)

    def grpo():
        from mascot.stage1.speaker_grpo import SpeakerGRPOConfig, train_speaker

        out = train_speaker(
            SpeakerGRPOConfig(
                model_name=str(model),
                data_path=str(data["candidates"]),
                reward_model_path=str(rm_path["path"]),
                output_dir=str(tmp / "grpo"),
                num_generations=2,
                gradient_accumulation_steps=1,
                max_completion_length=8,
                eval_max_tokens=8,
                eval_samples_per_prompt=1,
                beta=0.0,
                mask_truncated_completions=False,
                **steps,
            )
        )
        meta = json.loads((out / "mascot_metadata.json").read_text())
        assert meta["steps"] == 1, meta["steps"]
        return {"path": str(out), "steps": meta["steps"]}

    if rm_path:
        check("speaker_grpo_step", grpo)
    else:
        results["speaker_grpo_step"] = {"ok": False, "error": "skipped: the reward model step failed"}

    def sft():
        from mascot.stage1.sft import SFTStageConfig, sft_rows, train_sft_on_rows

        rows = sft_rows(data["candidates"], "ED")
        out = train_sft_on_rows(
            SFTStageConfig(model_name=str(model), output_dir=str(tmp / "sft"), max_length=256, **steps),
            rows,
            tmp / "sft" / "out",
        )
        return {"path": str(out), "steps": json.loads((out / "mascot_metadata.json").read_text())["steps"]}

    check("sft_step", sft)

    def dpo():
        from mascot.stage2.director_dpo import DirectorDPOConfig, train_director_dpo

        out = train_director_dpo(
            DirectorDPOConfig(
                model_name=str(model),
                episode_dataset_path=str(data["directives"]),
                output_dir=str(tmp / "dpo"),
                format_pairs=True,
                max_length=256,
                **steps,
            )
        )
        return {"path": str(out), "steps": json.loads((out / "mascot_metadata.json").read_text())["steps"]}

    check("director_dpo_step", dpo)
    results["seconds"] = round(time.time() - t_all, 1)
    results["ok"] = ok and all(v.get("ok") for v in results.values() if isinstance(v, dict))
    write(results)
    where = "" if a.out == "-" else f"; results in {a.out}"
    print(f"{'all checks passed' if results['ok'] else 'FAILED'} in {results['seconds']} s on {a.device}{where}")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
