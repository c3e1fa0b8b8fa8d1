"""Constrained decoding of the director and the judge: what the grammar's token mask costs the embedded model, and what it changes in
the demo run.

    python bench/constrained_decoding.py throughput [--reps 3] [--requests 16]
    python bench/constrained_decoding.py demo --before RUNS/smoke --after RUNS/smoke [--before-commit C] [--after-commit C]

`throughput`: the embedded SmolLM2-135M answers director requests (the real prompt on 16 different states, sampled at 0.7 with seeds, 64
new tokens at most) and judge requests (the persona rubric with one worked example, greedy, 80 tokens) with and without their output
constraint, alternated in one process, at concurrency 1 (one request at a time) and 16 (one batch). Per setting: generated tokens per second
of wall time, decode milliseconds per step (the backend's own decode counter over the longest row's steps), and for the constrained runs
the seconds spent in the grammar's mask (matchers advanced, bitmasks filled and applied) as a share of the decode time: measured inside
the same `generate` calls, that share does not move with the load of a shared machine as wall times do. Mean and spread over the
repetitions. Writes bench/results/constrained_decoding.json (its `throughput` entry).

`demo`: two finished `mascot run configs/smoke.yaml` folders, one from before constrained decoding and one with it (the defaults): per
stage, the agent turns of its conversations and how many of them fell back to a random speaker, the branching candidates that did not
parse, the judge calls and the judgements that did not parse, the constraint violations, and the stage's seconds. Writes the `demo` entry
of the same file.
"""

import argparse, asyncio, json, os, platform, statistics, subprocess, time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "constrained_decoding.json"


def provenance() -> dict:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("model name")), platform.processor()
    )
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "isa": "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "other",
            "bf16_units": any(f in flags for f in ("avx512_bf16", "amx_bf16")),
            "load_average_at_start": os.getloadavg()[0],
        },
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_files": len(git("status", "--porcelain", "--", "mascot").splitlines()),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def save(key: str, value: dict):
    res = json.loads(OUT.read_text()) if OUT.exists() else {}
    res[key] = {**value, "provenance": provenance()}
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {OUT} [{key}]")


# ---------------------------------------------------------------- throughput


def requests(kind: str, n: int, constrained: bool):
    from mascot.core.records import Turn
    from mascot.domain.personas import SUPPORT_ROSTER
    from mascot.domain.prompts import director_messages, directive_constraint
    from mascot.judging.rubrics import get_rubric, judge_messages, judgement_constraint
    from mascot.llm.types import ChatRequest

    worries = [
        "my exam",
        "my sister",
        "a job interview",
        "my dog",
        "moving house",
        "an old friend",
        "the rent",
        "a long week",
    ]
    situations = [
        f"I keep worrying about {worries[i % 8]}; it has been {i + 2} days and I cannot sleep." for i in range(n)
    ]
    if kind == "director":
        con = directive_constraint(SUPPORT_ROSTER) if constrained else None
        hist = lambda s, i: (
            [Turn(0, 0, "User", s, turn_type="user")]
            + ([Turn(1, 1, SUPPORT_ROSTER.names[i % 3], "That sounds heavy. I am here with you.")] if i % 2 else [])
        )
        return [
            ChatRequest(
                director_messages(s, hist(s, i), SUPPORT_ROSTER), max_tokens=64, temperature=0.7, seed=i, constraint=con
            )
            for i, s in enumerate(situations)
        ]
    rubric = get_rubric("persona", "ED")
    con = judgement_constraint(rubric) if constrained else None
    return [
        ChatRequest(
            judge_messages(
                rubric,
                s,
                f"User: {s}",
                "That sounds exhausting; it makes sense you feel on edge.",
                SUPPORT_ROSTER.personas[i % 3],
                1,
            ),
            max_tokens=80,
            logprobs=True,
            top_logprobs=20,
            constraint=con,
        )
        for i, s in enumerate(situations)
    ]


MASK_S = [0.0]  # seconds spent in the grammar mask's calls


def time_the_mask():
    "Count the seconds every `_GrammarMask` call takes (the mask's whole per-step work) into `MASK_S`."
    import mascot.llm.decoding as decoding

    call = decoding._GrammarMask.__call__

    def timed(self, input_ids, scores):
        t = time.perf_counter()
        try:
            return call(self, input_ids, scores)
        finally:
            MASK_S[0] += time.perf_counter() - t

    decoding._GrammarMask.__call__ = timed


async def measure(emb, reqs, concurrency: int) -> dict:
    from mascot.llm.embedded_backend import embedded_stats

    before, t, mask0 = embedded_stats(), time.perf_counter(), MASK_S[0]
    out = []
    for i in range(0, len(reqs), concurrency):
        out += await asyncio.gather(*[emb.chat(r) for r in reqs[i : i + concurrency]])
    wall, after = time.perf_counter() - t, embedded_stats()
    tokens = sum(r.completion_tokens for r in out)
    steps = sum(max(r.completion_tokens for r in out[i : i + concurrency]) for i in range(0, len(out), concurrency))
    bad = sum(r.constraint is not None and r.constraint.violation(o.text) is not None for r, o in zip(reqs, out))
    decode = after["decode_s"] - before["decode_s"]
    return {
        "mask_s": MASK_S[0] - mask0,
        "mask_share_of_decode": (MASK_S[0] - mask0) / decode if decode > 0 else None,
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "decode_ms_per_step": 1000
        * (after["decode_s"] - before["decode_s"])
        / max(1, steps - len(range(0, len(out), concurrency))),
        "violations": bad,
    }


def throughput(a):
    from mascot.llm.embedded_backend import EmbeddedBackend

    time_the_mask()
    emb = EmbeddedBackend(max_batch_size=16)
    emb.load()

    async def go():
        # one untimed round first: the grammars compiled, the kernels warm
        for kind in ("director", "judge"):
            await measure(emb, requests(kind, 2, True), 2)
        runs: dict = {}
        for rep in range(a.reps):
            for kind in ("director", "judge"):
                for conc in (1, 16):
                    n = a.requests if conc == 16 else a.requests // 4
                    order = (
                        (False, True) if rep % 2 == 0 else (True, False)
                    )  # alternated: drift in the machine's load hits both
                    for constrained in order:
                        m = await measure(emb, requests(kind, n, constrained), conc)
                        runs.setdefault(f"{kind}/c{conc}/{'constrained' if constrained else 'free'}", []).append(m)
                        print(
                            kind,
                            conc,
                            constrained,
                            {k: round(v, 3) if v is not None else None for k, v in m.items()},
                            flush=True,
                        )
        return runs

    runs = asyncio.run(go())
    summary = {}
    for key, ms in runs.items():
        tps = [m["tokens_per_s"] for m in ms]
        step = [m["decode_ms_per_step"] for m in ms]
        summary[key] = {
            "tokens_per_s_mean": round(statistics.fmean(tps), 2),
            "tokens_per_s_sd": round(statistics.stdev(tps), 2) if len(tps) > 1 else None,
            "decode_ms_per_step_mean": round(statistics.fmean(step), 2),
            "decode_ms_per_step_sd": round(statistics.stdev(step), 2) if len(step) > 1 else None,
            "tokens_mean": round(statistics.fmean(m["tokens"] for m in ms), 1),
            "mask_share_of_decode_mean": round(statistics.fmean(m["mask_share_of_decode"] or 0 for m in ms), 4),
            "mask_share_of_decode_max": round(max(m["mask_share_of_decode"] or 0 for m in ms), 4),
            "violations": sum(m["violations"] for m in ms),
        }
    ratios = {}
    for kind in ("director", "judge"):
        for conc in (1, 16):
            f, c = summary[f"{kind}/c{conc}/free"], summary[f"{kind}/c{conc}/constrained"]
            ratios[f"{kind}/c{conc}"] = {
                "tokens_per_s_constrained_over_free": round(c["tokens_per_s_mean"] / f["tokens_per_s_mean"], 3),
                "decode_step_constrained_over_free": round(
                    c["decode_ms_per_step_mean"] / f["decode_ms_per_step_mean"], 3
                ),
            }
    save(
        "throughput",
        {
            "model": emb.model_id,
            "dtype": str(emb.dtype),
            "reps": a.reps,
            "requests_at_c16": a.requests,
            "requests_at_c1": a.requests // 4,
            "summary": summary,
            "ratios": ratios,
            "runs": runs,
        },
    )


# ---------------------------------------------------------------- demo


def stage_counts(stage: Path) -> dict:
    "One stage folder of a run: its conversations' agent turns and fallbacks, its branching candidates, judge calls and failures, seconds."
    summary = json.loads((stage / "run_summary.json").read_text()) if (stage / "run_summary.json").exists() else {}
    meta = json.loads((stage / "meta.json").read_text()) if (stage / "meta.json").exists() else {}
    turns = fallbacks = constrained = cands = unparsed = 0
    for f in stage.rglob("*.jsonl"):
        if any(p.endswith(".runs") for p in f.parts) or f.name.startswith(("scores_", "pairs")):
            continue
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            # a conversation record, or one that holds it (group data's scored episodes)
            conv = rec if isinstance(rec.get("turns"), list) and "state" not in rec else rec.get("episode")
            if isinstance(conv, dict) and isinstance(conv.get("turns"), list):
                for t in conv["turns"]:
                    if t.get("turn_type") != "user" and t.get("directive_source"):
                        turns += 1
                        fallbacks += t["directive_source"] == "fallback"
                        constrained += bool(t.get("directive_constrained"))
            if isinstance(rec.get("candidates"), list) and "state" in rec:  # a branching state
                cands += len(rec["candidates"])
                unparsed += sum(c.get("directive") is None for c in rec["candidates"])
    # the stage's jobs record their calls in their own run folders
    jobs = [summary] + [
        json.loads((Path(j["path"]) / "run_summary.json").read_text())
        for j in summary.get("job_runs", [])
        if (Path(j["path"]) / "run_summary.json").exists()
    ]
    judge_calls = sum(((j.get("roles") or {}).get("judge") or {}).get("calls", 0) for j in jobs)
    # the director GRPO's held-out check: how often each director's sampled directives parsed
    held = {}
    for m in stage.rglob("mascot_metadata.json"):
        d = json.loads(m.read_text())
        for k in ("heldout_untrained", "heldout_trained"):
            if isinstance(d.get(k), dict):
                held[f"{k}_parse_rate"] = d[k].get("parse_rate")
        for k in ("untrained", "trained"):
            if isinstance((d.get("heldout_deployed") or {}).get(k), dict):
                held[f"heldout_deployed_{k}_parse_rate"] = d["heldout_deployed"][k].get("parse_rate")
    return {
        **held,
        "director_turns": turns,
        "fallback_turns": fallbacks,
        "constrained_turns": constrained,
        "branching_candidates": cands,
        "branching_unparsed": unparsed,
        "judge_calls": judge_calls,
        "judge_parse_failures": summary.get("num_annotation_failures", 0) if judge_calls else 0,
        "directive_parse_failures": summary.get("num_directive_parse_failures", 0),
        "constraint_violations": summary.get("num_constraint_violations"),
        "seconds": meta.get("seconds"),
    }


def demo(a):
    out = {}
    for name, run, commit in (("before", a.before, a.before_commit), ("after", a.after, a.after_commit)):
        run = Path(run)
        stages = {p.name: stage_counts(p) for p in sorted(run.iterdir()) if p.is_dir() and (p / "meta.json").exists()}
        tot = lambda k: sum(s[k] or 0 for s in stages.values())
        out[name] = {
            "run": str(run),
            "commit": commit,
            "stages": stages,
            "director_turns": tot("director_turns"),
            "fallback_turns": tot("fallback_turns"),
            "fallback_rate": round(tot("fallback_turns") / max(1, tot("director_turns")), 4),
            "branching_unparsed_rate": round(tot("branching_unparsed") / max(1, tot("branching_candidates")), 4),
            "judge_calls": tot("judge_calls"),
            "judge_parse_failures": tot("judge_parse_failures"),
            "judge_parse_failure_rate": round(tot("judge_parse_failures") / max(1, tot("judge_calls")), 4),
            "constraint_violations": tot("constraint_violations"),
            "pipeline_seconds": round(tot("seconds"), 1),
        }
    save("demo", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--reps", type=int, default=3)
    t.add_argument(
        "--requests",
        type=int,
        default=16,
        help="requests per measurement at concurrency 16 (a quarter at concurrency 1)",
    )
    d = sub.add_parser("demo")
    d.add_argument("--before", required=True, help="a finished smoke run folder without constrained decoding")
    d.add_argument("--after", required=True, help="a finished smoke run folder with it")
    d.add_argument("--before-commit", help="the commit the before run ran")
    d.add_argument("--after-commit", help="the commit the after run ran")
    a = ap.parse_args()
    throughput(a) if a.cmd == "throughput" else demo(a)


if __name__ == "__main__":
    main()
