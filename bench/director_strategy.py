"""The director measured against human supporters: does it choose the persona whose strategy family a trained ESConv supporter used next?

States. Each line of an ESConv strategy file (the authors' `*WithStrategy_short.tsv` format, see shared/data/README.md) is one state: the
window of the conversation before one supporter turn, and that turn's strategy. The strategy maps onto the support roster (MAPPING);
Self-disclosure and Other(s) states are left out. The director sees the window as its conversation: seeker turns as the user's, supporter
turns under the name "Supporter" (no persona is credited with them, so the prompt's "Already spoke" line carries no cue), no situation.

Choice. The package's director prompt (`director_messages`, support roster), its answer prefilled up to the name (`{"agent_name": "`, as the
directive's output constraint begins) and the three names scored by their log-likelihood: the choice is restricted to the roster and needs
no generation. Score: 1 when the chosen persona is the state's family.

Metric. Balanced accuracy (mean recall over the three personas) on the test states, with a 95% percentile bootstrap over test conversations
(all seeds' predictions of a conversation move together; differences are paired on the same resamples).

References (not targets): each constant, random (drawn per seed), position (the most frequent family at the turn's index in training, the
overall one where the index is unseen), tfidf (logistic regression on the last seeker message and the previous supporter turn), probe
(logistic regression on the frozen base model's last hidden state at the point it names the persona). Their regularisation (C) is chosen on
the validation conversations. Methods: untrained (the base director), sft (the package's `train_sft_on_rows` on the label's directive),
grpo (TRL's GRPOTrainer as `train_director_grpo` builds it: the package's policy, GRPO config, LoRA, format reward and the directive's
constrained sampling, with the reward 1 when the sampled directive names the state's family in place of the rollout's group reward), dpo
(the package's `train_director_dpo` on pairs: the family's directive over another persona's, with TRL's rpo_alpha adding the chosen NLL).

Protocol. The training file's conversations are shuffled once (SPLIT_SEED); without --test-path the first --test-fraction is the test split,
then --val-fraction of the rest is validation. Trained methods see class-balanced training subsets drawn per seed. Test states are scored
once per seed. Every (method, seed) record is kept in --work-dir, so a stopped run resumes; the JSON is rewritten after each record.

    python bench/director_strategy.py --train-path ../shared/data/esconv_strategy/dev.tsv [--test-path FILE] [--seeds 0 1 2 3 4]

A test file from conversations in the authors' original ESConv.json format: bench/esconv_strategy_file.py writes them in this format.
"""

import argparse, copy, datetime, hashlib, json, os, platform, random, re, subprocess, sys, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from mascot.domain.personas import SUPPORT_ROSTER
from mascot.stage2.director_sft import SUPPORTER_LABEL as SUPPORTER, UNSTATED_SITUATION as SITUATION

MAPPING = SUPPORT_ROSTER.strategy_personas  # the support roster's strategy families (mascot/domain/personas.py)
NAMES = ["The Anchor", "The Catalyst", "The Beacon"]
SPLIT_SEED = 52
REFERENCES = ["constant_anchor", "constant_catalyst", "constant_beacon", "random", "position", "tfidf", "probe"]
TRAINED = ["sft", "grpo", "dpo"]
METHODS = REFERENCES + ["untrained"] + TRAINED


# ---- the file ----
def read_states(path: Path) -> list[dict]:
    """Every labelled state of a strategy file (the package's `strategy_states_tsv` with the support roster's mapping: a new conversation
    where the last turn index does not grow), with the text the tf-idf reference reads."""
    from mascot.stage2.director_sft import strategy_states_tsv

    out = strategy_states_tsv(path, MAPPING)
    for s in out:
        seeker = [t for w, t in s["history"] if w == "0"]
        supporter = [t for w, t in s["history"] if w == "1"]
        s["text"] = f"{seeker[-1] if seeker else ''} || {supporter[-1] if supporter else ''}"
    return out


def prompt_of(state: dict) -> list[dict]:
    "The director's prompt at the state (`state_messages`): no situation, every supporter turn under 'Supporter' (no cue in 'Already spoke')."
    from mascot.stage2.director_sft import state_messages

    return state_messages(state, SUPPORT_ROSTER, credit=False)


def directive_text(name: str) -> str:
    from mascot.domain.personas import SUPPORT_ROSTER as roster
    from mascot.domain.prompts import DEFAULT_ACTION

    tone = {p.name: p.tone for p in roster.personas}[name]
    return json.dumps({"agent_name": name, "action": DEFAULT_ACTION, "tone": tone})


def split(train_states, test_states, test_fraction, val_fraction):
    "Conversations of the training file shuffled once (SPLIT_SEED): test (when no test file), validation, training."
    convs = list(dict.fromkeys(s["conversation"] for s in train_states))
    random.Random(SPLIT_SEED).shuffle(convs)
    n_test = 0 if test_states is not None else round(len(convs) * test_fraction)
    test_c, rest = set(convs[:n_test]), convs[n_test:]
    val_c = set(rest[: round(len(rest) * val_fraction)])
    part = {
        "train": [s for s in train_states if s["conversation"] not in test_c | val_c],
        "validation": [s for s in train_states if s["conversation"] in val_c],
        "test": test_states if test_states is not None else [s for s in train_states if s["conversation"] in test_c],
    }
    return part, sorted(val_c, key=lambda c: int(c.split("#")[1])), sorted(test_c, key=lambda c: int(c.split("#")[1]))


def cap_per_conversation(states, k, seed):
    "At most k states per conversation, drawn once with `seed` (the CPU budget's size; every conversation kept)."
    if not k:
        return states
    by = {}
    for s in states:
        by.setdefault(s["conversation"], []).append(s)
    rng = random.Random(seed)
    keep = {id(x) for c in by for x in (rng.sample(by[c], k) if len(by[c]) > k else by[c])}
    return [s for s in states if id(s) in keep]


def balanced_subset(states, n, seed):
    "n states, as equal a number per family as the states allow, drawn with `seed`."
    rng = random.Random(seed)
    by = {m: [s for s in states if s["label"] == m] for m in NAMES}
    for v in by.values():
        rng.shuffle(v)
    out = [v[i] for i in range(n) for v in by.values() if i < len(v)][:n]
    rng.shuffle(out)
    return out


# ---- the metric ----
def balanced_accuracy(labels, preds) -> dict:
    rec = {m: float(np.mean([p == m for l, p in zip(labels, preds) if l == m])) for m in NAMES if m in labels}
    return {
        "balanced_accuracy": round(float(np.mean(list(rec.values()))), 4),
        "recall": {k: round(v, 4) for k, v in rec.items()},
    }


class Bootstrap:
    "Resamples of test conversations (multinomial weights), shared by every method, so differences are paired."

    def __init__(self, states, n_boot=4000, seed=0):
        self.convs = sorted({s["conversation"] for s in states})
        ci = {c: i for i, c in enumerate(self.convs)}
        self.conv = np.array([ci[s["conversation"]] for s in states])
        self.lab = np.array([NAMES.index(s["label"]) for s in states])
        rng = np.random.default_rng(seed)
        self.w = rng.multinomial(len(self.convs), [1 / len(self.convs)] * len(self.convs), size=n_boot).astype(float)
        self.total = self._per_conv(np.ones(len(states)))

    def _per_conv(self, v):
        m = np.zeros((len(self.convs), 3))
        np.add.at(m, (self.conv, self.lab), v)
        return m

    def curve(self, preds_by_seed: list[list[str]]) -> np.ndarray:
        "Balanced accuracy on each resample, averaged over the seeds' predictions; and on the sample itself (last entry)."
        out = []
        for preds in preds_by_seed:
            hit = self._per_conv(np.array([p == NAMES[l] for p, l in zip(preds, self.lab)], dtype=float))
            w = np.vstack([self.w, np.ones(len(self.convs))])
            with np.errstate(invalid="ignore"):
                out.append(np.nanmean((w @ hit) / (w @ self.total), axis=1))
        return np.mean(out, axis=0)


def summary_of(vals: np.ndarray) -> dict:
    b = vals[:-1]
    return {
        "mean": round(float(vals[-1]), 4),
        "ci95": [round(float(np.percentile(b, 2.5)), 4), round(float(np.percentile(b, 97.5)), 4)],
    }


# ---- the base model's choice and its last hidden state ----
class Chooser:
    'The director\'s name choice by log-likelihood after the prefilled `{"agent_name": "`, the shared prompt prefix computed once.'

    def __init__(self, adapter: str | None = None):
        import torch
        from mascot.training.models import load_causal_lm
        from mascot.core.defaults import CPU_MODEL

        self.torch = torch
        self.model, self.tok = load_causal_lm(CPU_MODEL)
        if adapter:
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, adapter).merge_and_unload()
        self.model.eval()
        self.prefix = None

    def _ids(self, state, name):
        text = self.tok.apply_chat_template(prompt_of(state), tokenize=False, add_generation_prompt=True)
        return self.tok(text + '{"agent_name": "' + name + '"', add_special_tokens=False).input_ids

    def choose(self, states: list[dict], hidden: bool = False):
        "Per state: the chosen name, the three log-likelihoods, and (hidden) the last hidden state before the names differ."
        torch = self.torch
        ids = [[self._ids(s, n) for n in NAMES] for s in states]
        if (
            self.prefix is None
        ):  # the prefix every state shares: the system prompt and the user's turn up to its history
            a, b = (self._ids({"history": [(sp, "x")]}, NAMES[0]) for sp in "01")
            k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            with torch.no_grad():
                out = self.model(torch.tensor([a[:k]]), use_cache=True)
            self.prefix = (a[:k], out.past_key_values)
        pre, cache = self.prefix
        res = []
        for row in ids:
            assert all(x[: len(pre)] == pre for x in row)
            common = len(pre)
            while all(common < len(x) for x in row) and len({x[common] for x in row}) == 1:
                common += 1
            with torch.no_grad():
                c = copy.deepcopy(cache)
                out = self.model(
                    torch.tensor([row[0][len(pre) : common]]),
                    past_key_values=c,
                    use_cache=True,
                    output_hidden_states=hidden,
                )
                first_lp = torch.log_softmax(out.logits[0, -1].float(), -1)
                lls = []
                for x in row:
                    rest = x[common:]
                    ll = float(first_lp[rest[0]])
                    if len(rest) > 1:
                        o2 = self.model(torch.tensor([rest[:-1]]), past_key_values=copy.deepcopy(c), use_cache=True)
                        lp = torch.log_softmax(o2.logits[0].float(), -1)
                        ll += float(sum(lp[i, t] for i, t in enumerate(rest[1:])))
                    lls.append(ll)
            r = {"choice": NAMES[int(np.argmax(lls))], "loglik": [round(v, 4) for v in lls]}
            if hidden:
                r["hidden"] = out.hidden_states[-1][0, -1].float().numpy()
            res.append(r)
        return res


# ---- trainers ----
def train_sft(states, out: Path, recipe: dict, seed: int) -> Path:
    from mascot.stage1.sft import SFTStageConfig, train_sft_on_rows

    rows = [
        {"prompt": prompt_of(s), "completion": [{"role": "assistant", "content": directive_text(s["label"])}]}
        for s in states
    ]
    cfg = SFTStageConfig(
        dataset="ESConv",
        data_path=str(out),
        output_dir=str(out.parent),
        run_name=out.name,
        seed=seed,
        num_train_epochs=recipe["sft_epochs"],
        learning_rate=recipe["sft_lr"],
        per_device_train_batch_size=recipe["batch"],
    )
    return train_sft_on_rows(
        cfg, rows, out, kind="director", data="esconv strategy states (bench/director_strategy.py)"
    )


def train_dpo(states, out: Path, recipe: dict, seed: int) -> Path:
    from mascot.training.pairs import save_pairs
    from mascot.stage2.director_dpo import DirectorDPOConfig, train_director_dpo

    rng = random.Random(seed)
    rows = []
    for s in states:
        other = rng.choice([n for n in NAMES if n != s["label"]])
        rows.append(
            {
                "prompt": prompt_of(s),
                "chosen": [{"role": "assistant", "content": directive_text(s["label"])}],
                "rejected": [{"role": "assistant", "content": directive_text(other)}],
                "score_chosen": 1.0,
                "score_rejected": 0.0,
                "persona": "director",
                "context_id": s["conversation"],
                "query_id": f"{s['id']}>{other}",
            }
        )
    pairs = out.parent / f"{out.name}_pairs"
    pairs.mkdir(parents=True, exist_ok=True)
    save_pairs(rows, pairs)
    return train_director_dpo(
        DirectorDPOConfig(
            dataset="ESConv",
            episode_dataset_path=str(pairs),
            output_dir=str(out.parent),
            run_name=out.name,
            seed=seed,
            num_train_epochs=recipe["dpo_epochs"],
            learning_rate=recipe["dpo_lr"],
            per_device_train_batch_size=recipe["batch"],
            # RPO: DPO's loss plus rpo_alpha x the chosen directive's NLL (TRL's loss types sigmoid + sft)
            trl={"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, recipe["rpo_alpha"]]},
        )
    )


def train_grpo(states, out: Path, recipe: dict, seed: int) -> Path:
    "TRL's GRPOTrainer as train_director_grpo builds it (policy, config, LoRA, format reward, constrained sampling); the reward: the family."
    import datasets
    from transformers import set_seed
    from trl import GRPOTrainer
    from mascot.domain.personas import SUPPORT_ROSTER as roster
    from mascot.domain.prompts import directive_constraint, parse_directive
    from mascot.stage2.director_grpo import director_policy, constrain_generation
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig
    from mascot.stage2.director_rewards import make_directive_format_reward
    from mascot.training.configs import grpo_config, lora_config
    from mascot.training.provenance import save_trained, training_run, record_training

    cfg = DirectorGRPOConfig(
        dataset="ESConv",
        episode_dataset_path=str(out),
        group_reward_model_path="the state's strategy family",
        output_dir=str(out.parent),
        run_name=out.name,
        seed=seed,
        max_steps=recipe["grpo_steps"],
        learning_rate=recipe["grpo_lr"],
        num_generations=recipe["grpo_generations"],
        per_device_train_batch_size=recipe["grpo_generations"],
        gradient_accumulation_steps=recipe["grpo_accum"],
        max_completion_length=recipe["grpo_max_completion"],
    )

    def named(text: str) -> str | None:
        "The persona a sampled directive names; past the cap the JSON may be cut after the name, which still names it."
        d = parse_directive(text, roster)
        m = re.match(r'\s*\{\s*"agent_name"\s*:\s*"(The \w+)"', text)
        return d.agent_name if d else (m.group(1) if m and m.group(1) in NAMES else None)

    def family_reward(completions, family, **kw) -> list[float]:
        return [float(named(c[-1]["content"]) == f) for c, f in zip(completions, family)]

    ds = datasets.Dataset.from_list([{"prompt": prompt_of(s), "family": s["label"]} for s in states])
    with training_run(out, cfg) as run:
        set_seed(seed)
        model, tok = director_policy(cfg)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[family_reward, make_directive_format_reward(roster)],
            args=grpo_config(cfg.model_copy(update={"reward_weights": list(cfg.reward_weights)}), str(out / "trainer")),
            train_dataset=ds,
            processing_class=tok,
            peft_config=lora_config(cfg, "CAUSAL_LM"),
        )
        constrain_generation(trainer.model, tok, directive_constraint(roster))
        result = trainer.train()
        saved = save_trained(trainer, tok, out)
        record_training(
            out,
            run,
            cfg,
            result,
            saved,
            kind="director",
            algorithm="grpo",
            reward="1 if the directive names the state's family",
        )
    return out


# ---- references ----
def position_rule(train, states):
    from collections import Counter

    overall = Counter(s["label"] for s in train).most_common(1)[0][0]
    by = {}
    for s in train:
        by.setdefault(s["turn_index"], Counter())[s["label"]] += 1
    return [by[s["turn_index"]].most_common(1)[0][0] if s["turn_index"] in by else overall for s in states]


def fit_lr(Xtr, ytr, Xval, yval, grid=(0.01, 0.1, 1.0, 10.0)):
    "Logistic regression (balanced class weights), its C chosen by validation balanced accuracy."
    from sklearn.linear_model import LogisticRegression

    best = None
    for C in grid:
        m = LogisticRegression(C=C, class_weight="balanced", max_iter=2000).fit(Xtr, ytr)
        ba = balanced_accuracy(yval, list(m.predict(Xval)))["balanced_accuracy"]
        if best is None or ba > best[0]:
            best = (ba, C, m)
    return best


def provenance() -> dict:
    import torch

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (l.split(":", 1)[1].strip() for l in flags.splitlines() if l.startswith("model name")), platform.processor()
    )
    git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "machine": {
            "cpu": model,
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "commit": git("rev-parse", "--short", "HEAD"),
        "mascot_files_differing_from_commit": len(git("status", "--porcelain", "--", "mascot").splitlines()),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def sha256(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


# ---- the run ----
def args_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a(
        "--train-path",
        required=True,
        help="an ESConv strategy file (training; validation and, without --test-path, the test split are carved from it)",
    )
    a(
        "--test-path",
        default=None,
        help="a file in the same format scored once at the end; unset: a test split of --train-path",
    )
    a("--output", default=str(ROOT / "bench/results/director_strategy.json"), help="the JSON written")
    a(
        "--work-dir",
        default=None,
        help="per (method, seed) records and trained adapters, for resuming; default: a folder in the temp dir named after --output",
    )
    a("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    a("--methods", nargs="+", default=METHODS, choices=METHODS)
    a(
        "--test-fraction",
        type=float,
        default=0.3,
        help="share of the training file's conversations kept as the test split (no --test-path)",
    )
    a("--val-fraction", type=float, default=0.15, help="share of the remaining conversations kept for validation")
    a(
        "--test-states-per-conversation",
        type=int,
        default=2,
        help="test states scored per conversation (drawn once); 0: all",
    )
    a(
        "--val-states-per-conversation",
        type=int,
        default=1,
        help="validation states per conversation (drawn once); 0: all",
    )
    a(
        "--probe-train-states",
        type=int,
        default=90,
        help="training states the probe is fitted on (their hidden states cost a forward pass each)",
    )
    a(
        "--validation-only",
        action="store_true",
        help="score the validation states in place of the test states (choosing a recipe); never the test split",
    )
    a(
        "--score-validation",
        action="store_true",
        help="also score the trained directors on the validation states (reported, not used)",
    )
    a("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: every core)")
    a("--batch", type=int, default=4, help="per-device batch of SFT and DPO")
    a("--sft-states", type=int, default=36)
    a("--sft-epochs", type=float, default=1.0)
    a("--sft-lr", type=float, default=5e-4)
    a("--dpo-states", type=int, default=24)
    a("--dpo-epochs", type=float, default=1.0)
    a("--dpo-lr", type=float, default=5e-4)
    a(
        "--rpo-alpha",
        type=float,
        default=1.0,
        help="weight of the chosen directive's NLL beside DPO's loss (RPO's alpha)",
    )
    a("--grpo-steps", type=int, default=6)
    a(
        "--grpo-accum",
        type=int,
        default=2,
        help="prompts per GRPO step (gradient accumulation; one prompt's group per micro-step)",
    )
    a("--grpo-generations", type=int, default=4)
    a("--grpo-lr", type=float, default=5e-4)
    a(
        "--grpo-max-completion",
        type=int,
        default=12,
        help="token cap of a sampled directive (the name is complete by then)",
    )
    return ap


def main(argv=None):
    a = args_parser().parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    t0 = time.time()
    for p in (a.train_path, a.test_path):
        if p and not Path(p).is_file():
            sys.exit(f"{p}: no such file (--train-path / --test-path take an ESConv strategy .tsv)")
    try:
        train_all = read_states(Path(a.train_path))
        test_all = read_states(Path(a.test_path)) if a.test_path else None
    except ValueError as e:
        sys.exit(str(e))
    part, val_convs, test_convs = split(train_all, test_all, a.test_fraction, a.val_fraction)
    train = part["train"]
    val = cap_per_conversation(part["validation"], a.val_states_per_conversation, SPLIT_SEED)
    test = cap_per_conversation(part["test"], a.test_states_per_conversation, SPLIT_SEED)
    if a.validation_only:
        test = val
    if not (train and val and test):
        sys.exit(
            f"{a.train_path}: too few conversations for training, validation and test ({len(train)}, {len(val)}, {len(test)} states)"
        )
    out = Path(a.output)
    work = Path(
        a.work_dir
        or Path(tempfile.gettempdir())
        / f"director_strategy-{hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:8]}"
    )
    (work / "records").mkdir(parents=True, exist_ok=True)
    print(f"work dir {work}; {len(train)} training, {len(val)} validation, {len(test)} test states", flush=True)
    recipe = {k: getattr(a, k) for k in vars(a) if k.split("_")[0] in ("sft", "dpo", "grpo", "rpo", "batch", "probe")}
    files = {"train": a.train_path, **({"test": a.test_path} if a.test_path else {})}
    protocol = {
        "files": {k: {"path": str(p), "sha256": sha256(Path(p))} for k, p in files.items()},
        "mapping": MAPPING,
        "states": "each labelled line is one state: the window before a supporter turn; its strategy's family is the label; Self-disclosure and Other(s) left out",
        "director_prompt": f"director_messages (support roster) with situation {SITUATION!r}; seeker turns as the user's, supporter turns as {SUPPORTER!r}",
        "choice": 'the answer prefilled with \'{"agent_name": "\'; the roster name with the highest log-likelihood',
        "split": f"training file's conversations shuffled with random.Random({SPLIT_SEED}): "
        + ("test = --test-path; " if a.test_path else f"first {a.test_fraction:.0%} test; ")
        + f"{a.val_fraction:.0%} of the rest validation; the rest training",
        "test_conversations": test_convs
        if not a.test_path
        else f"all {len({s['conversation'] for s in test})} of {a.test_path}",
        "validation_conversations": val_convs,
        "states_scored": f"up to {a.test_states_per_conversation or 'all'} per test conversation and {a.val_states_per_conversation or 'all'} per validation conversation, drawn once with seed {SPLIT_SEED}",
        "n_states": {
            "train": len(train),
            "validation": len(val),
            "test": len(test),
            "test_before_cap": len(part["test"]),
        },
        "labels": {
            k: {n: sum(s["label"] == n for s in v) for n in NAMES}
            for k, v in (("train", train), ("validation", val), ("test", test))
        },
        "seeds": a.seeds,
        "recipe": recipe,
        "scored": "validation states only (--validation-only)" if a.validation_only else "test states",
        "recipe_choice": "fixed before any score and not compared with another (the package's defaults but the sizes, set by the CPU budget, "
        "and one learning rate for the three trainers); C of tfidf and probe chosen on validation; test scored once per seed",
        "training_subsets": "class-balanced draws from the training states, per seed",
        "metric": "balanced accuracy; 95% percentile bootstrap over test conversations (4,000 resamples, paired across methods, seeds averaged within a resample)",
    }

    base_path = work / "base.npz"
    if not base_path.exists() and any(m in a.methods for m in ("untrained", "probe")):
        t = time.time()
        probe_train = random.Random(SPLIT_SEED).sample(train, min(a.probe_train_states, len(train)))
        ch = Chooser()
        got = {
            k: ch.choose(v, hidden=True) for k, v in (("probe_train", probe_train), ("validation", val), ("test", test))
        }
        np.savez(
            base_path,
            **{f"{k}_hidden": np.stack([r["hidden"] for r in v]) for k, v in got.items()},
            **{f"{k}_choice": np.array([r["choice"] for r in v]) for k, v in got.items()},
            probe_train_ids=np.array([s["id"] for s in probe_train]),
            seconds=time.time() - t,
        )
        print(f"base pass {time.time() - t:.0f} s", flush=True)

    def rec_path(m, seed):
        return work / "records" / f"{m}_seed{seed}.json"

    def record(m, seed, test_preds, val_preds=None, **extra):
        r = {
            "method": m,
            "seed": seed,
            **balanced_accuracy([s["label"] for s in test], test_preds),
            "n_states": len(test),
            "n_conversations": len({s["conversation"] for s in test}),
            "chosen": {n: test_preds.count(n) for n in NAMES},
        }
        if val_preds is not None:
            r["validation_balanced_accuracy"] = balanced_accuracy([s["label"] for s in val], val_preds)[
                "balanced_accuracy"
            ]
        r.update(extra)
        rec_path(m, seed).write_text(json.dumps({**r, "test_preds": test_preds}))
        written_here.append(f"{m}_seed{seed}")
        write()
        print({k: v for k, v in r.items() if k not in ("test_preds",)}, flush=True)

    def write():
        recs = [json.loads(p.read_text()) for p in sorted((work / "records").glob("*.json"))]
        boot = Bootstrap(test)
        curves, summ = {}, {}
        for m in METHODS:
            ok = [r for r in recs if r["method"] == m and "test_preds" in r and not r.get("failed")]
            if ok:
                curves[m] = boot.curve([r["test_preds"] for r in ok])
                summ[m] = {
                    **summary_of(curves[m]),
                    "n_seeds": len(ok),
                    "n_failed": sum(r["method"] == m and bool(r.get("failed")) for r in recs),
                }
        consts = [m for m in REFERENCES if m.startswith("constant_") and m in curves]
        if consts:
            best = max(consts, key=lambda m: (round(curves[m][-1], 6), m == "constant_catalyst"))
            summ["best_constant"] = best
        for m in TRAINED:
            if m in curves:
                for ref in (summ.get("best_constant"), "position", "untrained"):
                    if ref in curves:
                        d = summary_of(curves[m] - curves[ref])
                        summ[m][f"diff_vs_{'best_constant' if ref.startswith('constant_') else ref}"] = {
                            **d,
                            "excludes_0": d["ci95"][0] > 0 or d["ci95"][1] < 0,
                        }
        res = {
            "question": "does the director choose the persona whose ESConv strategy family a trained human supporter used next?",
            "protocol": protocol,
            "provenance": provenance(),
            "results": sorted(
                ({k: v for k, v in r.items() if k != "test_preds"} for r in recs),
                key=lambda r: (METHODS.index(r["method"]), r["seed"]),
            ),
            "summary": summ,
            "timing": {
                "base_pass_seconds": round(float(base["seconds"]), 1) if base is not None else None,
                "seconds_by_method": {
                    m: [r.get("seconds") for r in recs if r["method"] == m]
                    for m in TRAINED
                    if any(r["method"] == m for r in recs)
                },
                "this_invocation": {
                    "seconds": round(time.time() - t0, 1),
                    "records_written": len(written_here),
                    "records_resumed": len(recs) - len(written_here),
                    "threads": a.threads,
                },
                "note": "wall times on the machine in provenance, load not controlled; a resumed run's total spans invocations",
            },
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        os.replace(tmp, out)

    written_here = []
    labels = lambda ss: [s["label"] for s in ss]
    base = np.load(base_path) if base_path.exists() else None
    for seed in a.seeds:
        for m in a.methods:
            if rec_path(m, seed).exists():
                continue
            t = time.time()
            try:
                if m.startswith("constant_"):
                    n = "The " + m.split("_")[1].title()
                    record(m, seed, [n] * len(test), [n] * len(val))
                elif m == "random":
                    rng = random.Random(seed)
                    record(m, seed, [rng.choice(NAMES) for _ in test], [rng.choice(NAMES) for _ in val])
                elif m == "position":
                    record(m, seed, position_rule(train, test), position_rule(train, val))
                elif m == "tfidf":
                    from sklearn.feature_extraction.text import TfidfVectorizer

                    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit(
                        [s["text"] for s in train]
                    )
                    X = lambda ss: vec.transform([s["text"] for s in ss])
                    ba, C, lr = fit_lr(X(train), labels(train), X(val), labels(val))
                    record(
                        m,
                        seed,
                        list(lr.predict(X(test))),
                        list(lr.predict(X(val))),
                        C_chosen_on_validation=C,
                        features="last seeker message and previous supporter turn, word 1-2-grams",
                    )
                elif m == "probe":
                    from sklearn.pipeline import make_pipeline
                    from sklearn.preprocessing import StandardScaler
                    from sklearn.linear_model import LogisticRegression

                    ids = {s["id"]: s for s in train}
                    ytr = [ids[i]["label"] for i in base["probe_train_ids"]]
                    best = None
                    for C in (0.001, 0.01, 0.1, 1.0):
                        p = make_pipeline(
                            StandardScaler(), LogisticRegression(C=C, class_weight="balanced", max_iter=3000)
                        ).fit(base["probe_train_hidden"], ytr)
                        ba = balanced_accuracy(labels(val), list(p.predict(base["validation_hidden"])))[
                            "balanced_accuracy"
                        ]
                        best = best if best and best[0] >= ba else (ba, C, p)
                    record(
                        m,
                        seed,
                        list(best[2].predict(base["test_hidden"])),
                        list(best[2].predict(base["validation_hidden"])),
                        C_chosen_on_validation=best[1],
                        n_train=len(ytr),
                    )
                elif m == "untrained":
                    record(m, seed, [str(x) for x in base["test_choice"]], [str(x) for x in base["validation_choice"]])
                else:
                    sub = {"sft": a.sft_states, "dpo": a.dpo_states, "grpo": a.grpo_steps * a.grpo_accum}[m]
                    states = balanced_subset(train, sub, 1000 + seed)
                    d = work / "adapters" / f"{m}_seed{seed}"
                    {"sft": train_sft, "dpo": train_dpo, "grpo": train_grpo}[m](states, d, recipe, seed)
                    train_s = time.time() - t
                    ch = Chooser(str(d))
                    tp = [r["choice"] for r in ch.choose(test)]
                    vp = [r["choice"] for r in ch.choose(val)] if a.score_validation else None
                    hist = json.loads((d / "log_history.json").read_text()) if (d / "log_history.json").exists() else []
                    curve = [round(h[k], 4) for h in hist for k in h if k in ("loss", "rewards/family_reward/mean")]
                    record(
                        m,
                        seed,
                        tp,
                        vp,
                        n_train_states=len(states),
                        train_seconds=round(train_s, 1),
                        seconds=round(time.time() - t, 1),
                        training_curve=curve,
                    )
            except Exception as e:  # a failed (method, seed) is an outcome too
                rec_path(m, seed).write_text(
                    json.dumps(
                        {
                            "method": m,
                            "seed": seed,
                            "failed": f"{type(e).__name__}: {e}",
                            "seconds": round(time.time() - t, 1),
                        }
                    )
                )
                written_here.append(f"{m}_seed{seed}")
                write()
                print(f"{m} seed {seed} failed: {type(e).__name__}: {e}", flush=True)
    write()
    print(f"{out} written ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
