"""A few-minute check on a CUDA machine that training and serving use the accelerator: placement and dtype of every trainer's policy and
of the reward-model scorer, one reward-model training step on the embedded SmolLM2-135M, and the embedded backend on the GPU.

    .venv/bin/python scripts/gpu_check.py [--out gpu_check.json]

Prints one line per check and writes the results as JSON; exits 1 if any check fails. Needs no downloads (SmolLM2-135M ships with the package).
"""

import argparse, json, sys, tempfile, time, traceback
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gpu_check.json")
    a = ap.parse_args()
    import torch

    results, ok = (
        {
            "cuda": torch.cuda.is_available(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
        True,
    )
    if not results["cuda"]:
        print("no CUDA device: nothing to check")
        Path(a.out).write_text(json.dumps(results))
        return 1
    tmp = Path(tempfile.mkdtemp())

    def check(name, fn):
        nonlocal ok
        t = time.time()
        try:
            results[name] = {"ok": True, **(fn() or {}), "seconds": round(time.time() - t, 1)}
        except Exception as e:
            ok = False
            results[name] = {
                "ok": False,
                "error": f"{e.__class__.__name__}: {e}",
                "trace": traceback.format_exc()[-2000:],
            }
        print(
            name, results[name].get("ok"), {k: v for k, v in results[name].items() if k not in ("trace",)}, flush=True
        )

    from mascot.training.common import training_dtype
    from mascot.stage1.reward_model import known_label_pairs
    from mascot.training.reward_models import RewardModelConfig, train_reward_model, RewardModel
    from mascot.training.pairs import save_pairs
    from mascot.domain.datasets import load_contexts
    from mascot.llm.embedded import EmbeddedBackend
    from mascot.llm.types import ChatRequest

    def dtype():
        assert training_dtype() == torch.bfloat16, training_dtype()
        return {"training_dtype": str(training_dtype())}

    check("dtype", dtype)

    def embedded():
        import asyncio

        emb = EmbeddedBackend(device="cuda").load()
        r = asyncio.run(emb.chat(ChatRequest([{"role": "user", "content": "Say hello."}], max_tokens=8)))
        assert next(emb.model.parameters()).device.type == "cuda" and r.completion_tokens > 0
        return {"dtype": str(next(emb.model.parameters()).dtype)}

    check("embedded_backend_on_gpu", embedded)

    def reward_model():
        from mascot.domain.datasets import shared_data_dir

        rows = known_label_pairs(
            load_contexts("ESConv", split="train", data_path=str(shared_data_dir() / "esconv"))[:8]
        )
        (tmp / "pairs").mkdir(exist_ok=True)
        save_pairs(rows, tmp / "pairs")
        out = train_reward_model(
            RewardModelConfig(
                data_path=str(tmp / "pairs"),
                output_dir=str(tmp / "rm"),
                num_train_epochs=1,
                max_length=256,
                lora_r=4,
                per_device_train_batch_size=2,
                holdout_fraction=0.3,
                trl={"max_steps": 1},
            )
        )
        rm = RewardModel.load(out)
        p = next(rm.model.parameters())
        assert p.device.type == "cuda" and p.dtype == torch.bfloat16, (p.device, p.dtype)
        return {"scorer_device": str(p.device), "scorer_dtype": str(p.dtype), "path": str(out)}

    check("reward_model_one_step_and_scorer_on_gpu", reward_model)
    Path(a.out).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
