"""The director measured against human supporters: does it choose the persona whose strategy family a trained ESConv supporter used next?

States. Each line of an ESConv strategy file (the authors' `*WithStrategy_short.tsv` format, see shared/data/README.md) is one state: the
window of the conversation before one supporter turn, and that turn's strategy. The strategy maps onto the support roster (MAPPING);
Self-disclosure and Other(s) states are left out. The director sees the window as its conversation: seeker turns as the user's, supporter
turns under the name "Supporter" (no persona is credited with them, so the prompt's "Already spoke" line carries no cue), no situation.

Choice. The package's director prompt (`director_messages`, support roster), its answer prefilled up to the name (`{"agent_name": "`, as the
directive's output constraint begins) and the three names scored by their log-likelihood: the choice is restricted to the roster and needs
no generation. The prompt prefix every state shares is computed once per model.

Split. The training file's conversations are shuffled once (SPLIT_SEED 52); without --test-path the first --test-fraction (30%) is the test
split, then --val-fraction (15%) of the rest is validation, the rest training (dev.tsv: 1,342 training, 239 validation, 611 test states).
Every test state is scored and every validation state takes part (--val/--test-states-per-conversation 0). Test states are scored once per
(method, seed) and choose nothing: every choice is made on the validation states, or fixed before any score.

Metrics, per (method, seed): balanced accuracy (mean recall over the three personas), macro-F1 (sklearn's f1_score, average="macro"), the
per-persona pick counts, on the test states (and on the validation states: every reference, the untrained director, and the trained
ones with --score-validation). Summary per method: the mean over seeds with a 95% percentile bootstrap over test conversations (4,000
resamples; all seeds' predictions of a conversation move together; differences are paired on the same resamples).

References (not targets). constant_* (one persona always), random (drawn per seed), position (the most frequent family at the turn's index
in training, the overall one where the index is unseen), tfidf (logistic regression, balanced class weights, on three TF-IDF fields: the last
seeker turn, the last supporter turn and the whole window, word 1-2-grams, and the last speaker), probe (the ceiling of what the frozen base
model's states carry: StandardScaler and logistic regression with balanced class weights on the mean over the state's own tokens of layer
18's hidden state concatenated with layer 24's at the last token, where the persona is named; fitted on every training state). Their C is
chosen by validation balanced accuracy. The base pass (the untrained choices and the probe's features of every training, validation and
test state) runs once and is cached in --work-dir, shared by all seeds.

Methods. untrained (the base director). sft: `train_director_sft` (LoRA; the directive of the state's strategy as the target,
`strategy_directive`; the speaker name's tokens weighted by decision_weight 5, the personas balanced by oversampling), on every training
state, its step chosen by early stopping on validation loss (a class-balanced draw of --eval-per-persona validation states per persona,
fixed by SPLIT_SEED, evaluated every --sft-eval-steps, patience --sft-patience; the best step's adapter kept). grpo: `train_director_grpo`
from the same seed's SFT adapter, its reward `make_label_reward` (class-weighted: the persona's weight when the sampled directive names the
state's family, else 0), no format reward, on every training state (one is held out for the trainer's own check). dpo: `train_director_dpo`
(decision-weighted, class-balanced by the chosen persona) on pairs: each training state's directive over the same directive naming each
other persona. GRPO and DPO have no validation loss in the package: their recipe is fixed before any score.

Recipe (RECIPE, each a flag): LoRA rank 16 on every linear layer, batch 4. sft: 16 steps at learning rate 1e-3 (the package's
learnability recipe, tests/test_director_learning.py), evaluated every 4 steps on 12 validation states per persona, patience 2. grpo: 6 steps
of 2 prompts x 4 sampled directives (temperature 1, at most 10 tokens: the name is complete by then, and the label reward reads the name at
the directive's opening), learning rate 1e-4 (a tenth of SFT's, as it continues the SFT adapter), no KL term. dpo: 8 steps of 4 pairs at
5e-4, beta 0.1. The collapse watch probes 8 states. The trained directors score the test states; --score-validation adds the validation
states.

Budget. One seed of every method within 60 minutes on 2 cores. Measured on this machine's 2 cores under a light load (others' jobs at load
1-2), 2 torch threads: the scoring pass 0.44 s a state (8 states at a time, the shared prefix cached), so the base pass (2,192 states)
about 16 minutes and a trained director's 611 test states about 4.5; an SFT step of 4 rows about 24 s and its evaluation 1.3 s a row;
a GRPO prompt (4 directives, generation and loss) about 19 s; a DPO pair about 11 s (about twice an SFT row, measured under load). One
seed: base pass 16, references 2, sft 10 + 4.5, grpo 4.5 + 4.5, dpo 6.5 + 4.5, loading and saving 1.5: about 54 minutes. The JSON's
`timing` has the base pass and, per method, training and scoring seconds (wall and the process's CPU time). Every (method, seed) record,
a failure too, is kept in --work-dir, so a stopped run resumes; the JSON is rewritten after each record.

    python bench/director_strategy.py --train-path ../shared/data/esconv_strategy/dev.tsv [--test-path FILE] [--seeds 0 1 2]

A test file from conversations in the authors' original ESConv.json format: bench/esconv_strategy_file.py writes them in this format.
"""

import argparse, copy, datetime, hashlib, json, os, platform, random, subprocess, sys, tempfile, time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from mascot.domain.personas import SUPPORT_ROSTER
from mascot.stage2.director_sft import SUPPORTER_LABEL as SUPPORTER, UNSTATED_SITUATION as SITUATION

MAPPING = SUPPORT_ROSTER.strategy_personas  # the support roster's strategy families (mascot/domain/personas.py)
NAMES = ["The Anchor", "The Catalyst", "The Beacon"]
SPLIT_SEED = 52
PROBE_LAYERS = {
    "mean": 18,
    "last": 24,
}  # hidden_states index (0: the embeddings): the mean over the state's tokens, the last token
REFERENCES = ["constant_anchor", "constant_catalyst", "constant_beacon", "random", "position", "tfidf", "probe"]
TRAINED = ["sft", "grpo", "dpo"]
METHODS = REFERENCES + ["untrained"] + TRAINED
C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0)
TFIDF_FIELDS = ("seeker", "supporter", "window")


# ---- the file ----
def read_states(path: Path) -> list[dict]:
    """Every labelled state of a strategy file (the package's `strategy_states_tsv` with the support roster's mapping: a new conversation
    where the last turn index does not grow), with the fields the tf-idf reference reads: the last seeker turn, the last supporter turn,
    the window, and who spoke last ("0" seeker, "1" supporter)."""
    from mascot.stage2.director_sft import strategy_states_tsv

    out = strategy_states_tsv(path, MAPPING)
    for s in out:
        last = lambda who: next((t for w, t in reversed(s["history"]) if w == who), "")
        s["fields"] = {"seeker": last("0"), "supporter": last("1"), "window": " ".join(t for _, t in s["history"])}
        s["last_speaker"] = s["history"][-1][0] if s["history"] else ""
    return out


def prompt_of(state: dict) -> list[dict]:
    "The director's prompt at the state (`state_messages`): no situation, every supporter turn under 'Supporter' (no cue in 'Already spoke')."
    from mascot.stage2.director_sft import state_messages

    return state_messages(state, SUPPORT_ROSTER, credit=False)


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
    "At most k states per conversation, drawn once with `seed`; k 0: every state."
    if not k:
        return states
    by = {}
    for s in states:
        by.setdefault(s["conversation"], []).append(s)
    rng = random.Random(seed)
    keep = {id(x) for c in by for x in (rng.sample(by[c], k) if len(by[c]) > k else by[c])}
    return [s for s in states if id(s) in keep]


def per_persona(states, k, seed):
    "Up to k states of each family, drawn once with `seed`, in the states' order (the early-stopping evaluation set)."
    rng = random.Random(seed)
    keep = set()
    for m in NAMES:
        ids = [s["id"] for s in states if s["label"] == m]
        keep |= set(rng.sample(ids, min(k, len(ids))))
    return [s for s in states if s["id"] in keep]


# ---- the metrics ----
def scores(labels, preds) -> dict:
    "Balanced accuracy, per-persona recall, macro-F1 (sklearn) and the pick counts."
    from sklearn.metrics import f1_score

    rec = {m: float(np.mean([p == m for l, p in zip(labels, preds) if l == m])) for m in NAMES if m in labels}
    return {
        "balanced_accuracy": round(float(np.mean(list(rec.values()))), 4),
        "macro_f1": round(float(f1_score(labels, preds, average="macro", zero_division=0)), 4),
        "recall": {k: round(v, 4) for k, v in rec.items()},
        "picks": {n: list(preds).count(n) for n in NAMES},
    }


def balanced_accuracy(labels, preds) -> dict:
    return {k: v for k, v in scores(labels, preds).items() if k in ("balanced_accuracy", "recall")}


class Bootstrap:
    "Resamples of test conversations (multinomial weights), shared by every method, so differences are paired."

    def __init__(self, states, n_boot=4000, seed=0):
        self.convs = sorted({s["conversation"] for s in states})
        ci = {c: i for i, c in enumerate(self.convs)}
        self.conv = np.array([ci[s["conversation"]] for s in states])
        self.lab = np.array([NAMES.index(s["label"]) for s in states])
        rng = np.random.default_rng(seed)
        w = rng.multinomial(len(self.convs), [1 / len(self.convs)] * len(self.convs), size=n_boot).astype(float)
        self.w = np.vstack([w, np.ones(len(self.convs))])  # the last row: the sample itself

    def confusion(self, preds) -> np.ndarray:
        "Per resample (and the sample, last), the 3x3 confusion counts (true, predicted)."
        p = np.array([NAMES.index(x) for x in preds])
        m = np.zeros((len(self.convs), 9))
        np.add.at(m, (self.conv, self.lab * 3 + p), 1.0)
        return (self.w @ m).reshape(-1, 3, 3)

    def curve(self, preds_by_seed: list[list[str]], metric: str = "balanced_accuracy") -> np.ndarray:
        "`metric` (balanced_accuracy, macro_f1) on each resample, averaged over the seeds' predictions; the sample itself last."
        out = []
        for preds in preds_by_seed:
            c = self.confusion(preds)
            tp, true, pred = np.diagonal(c, axis1=1, axis2=2), c.sum(2), c.sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                if metric == "balanced_accuracy":  # recall over the personas present in the resample
                    v = np.nanmean(np.where(true > 0, tp / true, np.nan), axis=1)
                else:  # F1 over the personas present in the labels or the predictions (sklearn's labels), 0 where it has no true positive
                    f1 = np.where(true + pred > 0, 2 * tp / (true + pred), np.nan)
                    v = np.nanmean(f1, axis=1)
            out.append(v)
        return np.mean(out, axis=0)


def summary_of(vals: np.ndarray) -> dict:
    b = vals[:-1]
    return {
        "mean": round(float(vals[-1]), 4),
        "ci95": [round(float(np.percentile(b, 2.5)), 4), round(float(np.percentile(b, 97.5)), 4)],
    }


# ---- the model's choice and the probe's features ----
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

    def choose(self, states: list[dict], features: bool = False, batch: int = 8):
        """Per state: the chosen name, the three log-likelihoods, and (`features`) the probe's features: the mean over the state's own
        tokens (after the shared prefix, up to where the names differ) of hidden state PROBE_LAYERS["mean"], then the last token's
        hidden state PROBE_LAYERS["last"]. `batch` states go through the model at once (right-padded after the shared prefix)."""
        torch = self.torch
        if (
            self.prefix is None
        ):  # the prefix every state shares: the system prompt and the user's turn up to its history
            a, b = (
                self._ids({"history": [(sp, "x")], "strategies": [None], "situation": None}, NAMES[0]) for sp in "01"
            )
            k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            with torch.no_grad():
                out = self.model(torch.tensor([a[:k]]), use_cache=True)
            self.prefix = (a[:k], out.past_key_values)
        # states of similar length together (less padding), the results in the states' order
        order = sorted(range(len(states)), key=lambda i: len(self._ids(states[i], NAMES[0])))
        res = [None] * len(states)
        for i in range(0, len(order), batch):
            for j, r in zip(order[i : i + batch], self._choose([states[j] for j in order[i : i + batch]], features)):
                res[j] = r
        return res

    def _choose(self, states, features):
        torch = self.torch
        pre, cache = self.prefix
        P, pad = len(pre), self.tok.pad_token_id or 0
        rows, suf = [], []
        for s in states:
            row = [self._ids(s, n) for n in NAMES]
            assert all(x[:P] == pre for x in row)
            common = P
            while all(common < len(x) for x in row) and len({x[common] for x in row}) == 1:
                common += 1
            rows.append([x[common:] for x in row])  # each name's own tokens
            suf.append(row[0][P:common])  # the state's tokens up to where the names differ
        B, L = len(states), max(map(len, suf))
        ids, mask = torch.full((B, L), pad), torch.zeros((B, P + L), dtype=torch.long)
        mask[:, :P] = 1
        for j, x in enumerate(suf):
            ids[j, : len(x)] = torch.tensor(x)
            mask[j, P : P + len(x)] = 1
        n = torch.tensor([len(x) for x in suf])
        with torch.no_grad():
            c = copy.deepcopy(cache)
            c.batch_repeat_interleave(B)
            out = self.model(ids, attention_mask=mask, past_key_values=c, use_cache=True, output_hidden_states=features)
            first = torch.log_softmax(out.logits[torch.arange(B), n - 1].float(), -1)
            lls = [[float(first[j, r[k][0]]) for k in range(len(NAMES))] for j, r in enumerate(rows)]
            for k in range(len(NAMES)):  # the name's later tokens, after its first, in one more pass per name
                M = max(len(r[k]) for r in rows) - 1
                if M <= 0:
                    continue
                feed = torch.full((B, M), pad)
                m2 = torch.cat([mask, torch.zeros((B, M), dtype=torch.long)], 1)
                for j, r in enumerate(rows):
                    feed[j, : len(r[k]) - 1] = torch.tensor(r[k][:-1])
                    m2[j, P + L : P + L + len(r[k]) - 1] = 1
                pos = (P + n)[:, None] + torch.arange(M)[None]
                o2 = self.model(
                    feed, attention_mask=m2, position_ids=pos, past_key_values=copy.deepcopy(c), use_cache=True
                )
                lp = torch.log_softmax(o2.logits.float(), -1)
                for j, r in enumerate(rows):
                    lls[j][k] += float(sum(lp[j, t, tok] for t, tok in enumerate(r[k][1:])))
        res = []
        for j, ll in enumerate(lls):
            r = {"choice": NAMES[int(np.argmax(ll))], "loglik": [round(v, 4) for v in ll]}
            if features:
                h = out.hidden_states
                r["features"] = np.concatenate(
                    [
                        h[PROBE_LAYERS["mean"]][j, : n[j]].float().mean(0).numpy(),
                        h[PROBE_LAYERS["last"]][j, n[j] - 1].float().numpy(),
                    ]
                )
            res.append(r)
        return res


def base_pass(work: Path, splits: dict[str, list[dict]]) -> dict:
    """The untrained director's choices and the probe's features of every state of `splits`, cached per split in `work` (base_<split>.npz,
    keyed by the states' ids, the model and the layers), so every seed and a resumed run share them."""
    from mascot.core.defaults import CPU_MODEL

    got, ch = {}, None
    for k, ss in splits.items():
        key = hashlib.sha1(json.dumps([CPU_MODEL, PROBE_LAYERS, [s["id"] for s in ss]]).encode()).hexdigest()
        p = work / f"base_{k}.npz"
        if p.exists() and str(np.load(p)["key"]) == key:
            got[k] = dict(np.load(p))
            continue
        t, cpu = time.time(), time.process_time()
        ch = ch or Chooser()
        rs = ch.choose(ss, features=True)
        got[k] = {
            "features": np.stack([r["features"] for r in rs]),
            "choice": np.array([r["choice"] for r in rs]),
            "loglik": np.array([r["loglik"] for r in rs]),
            "seconds": np.array(time.time() - t),
            "cpu_seconds": np.array(time.process_time() - cpu),
            "key": np.array(key),
        }
        tmp = work / f"base_{k}.tmp{os.getpid()}.npz"
        np.savez(tmp, **got[k])
        os.replace(tmp, p)
        print(f"base pass, {k}: {len(ss)} states, {time.time() - t:.0f} s", flush=True)
    return got


# ---- references ----
def position_rule(train, states):
    from collections import Counter

    overall = Counter(s["label"] for s in train).most_common(1)[0][0]
    by = {}
    for s in train:
        by.setdefault(s["turn_index"], Counter())[s["label"]] += 1
    return [by[s["turn_index"]].most_common(1)[0][0] if s["turn_index"] in by else overall for s in states]


def fit_lr(Xtr, ytr, Xval, yval, scale=False, grid=C_GRID):
    "Logistic regression (balanced class weights; `scale`: after a StandardScaler), C chosen by validation balanced accuracy (ties: smaller C)."
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    best, curve = None, {}
    for C in grid:
        lr = LogisticRegression(C=C, class_weight="balanced", max_iter=5000)
        m = (make_pipeline(StandardScaler(), lr) if scale else lr).fit(Xtr, ytr)
        ba = balanced_accuracy(yval, list(m.predict(Xval)))["balanced_accuracy"]
        curve[str(C)] = ba
        if best is None or ba > best[0]:
            best = (ba, C, m)
    return best[2], best[1], curve


def tfidf_features(train, *others):
    "The tf-idf reference's features: each field's TF-IDF (word 1-2-grams, fitted on the training states) and the last speaker, side by side."
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import TfidfVectorizer

    vecs = {
        f: TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit([s["fields"][f] for s in train])
        for f in TFIDF_FIELDS
    }
    X = lambda ss: hstack(
        [vecs[f].transform([s["fields"][f] for s in ss]) for f in TFIDF_FIELDS]
        + [csr_matrix([[float(s["last_speaker"] == "0"), float(s["last_speaker"] == "1")] for s in ss])]
    ).tocsr()
    return [X(ss) for ss in (train, *others)]


# ---- trainers ----
def sft_rows(states):
    from mascot.stage2.director_sft import director_sft_rows

    return director_sft_rows(states, SUPPORT_ROSTER, credit=False)


def lora(recipe):
    return dict(lora_r=recipe["lora_r"], lora_alpha=2 * recipe["lora_r"], lora_target_modules=recipe["lora_targets"])


def train_sft(train, val, out: Path, recipe: dict, seed: int) -> Path:
    "`train_director_sft` on every training state; validation: the early-stopping set of the validation states."
    from mascot.stage2.director_sft import DirectorSFTConfig, train_director_sft

    cfg = DirectorSFTConfig(
        dataset="ESConv",
        output_dir=str(out.parent),
        run_name=out.name,
        seed=seed,
        max_steps=recipe["sft_max_steps"],
        learning_rate=recipe["sft_lr"],
        per_device_train_batch_size=recipe["batch"],
        trl={
            "gradient_accumulation_steps": recipe["grad_accum"],
            "per_device_eval_batch_size": recipe["batch"],
            "train_sampling_strategy": "group_by_length",
        },
        eval_steps=recipe["sft_eval_steps"],
        early_stopping_patience=recipe["sft_patience"],
        collapse_probe_states=recipe["probe_states"],
        collapse_probe_every=recipe["sft_eval_steps"],
        **lora(recipe),
    )
    return train_director_sft(
        cfg, sft_rows(train), out, eval_rows=sft_rows(val), data="esconv strategy states (bench/director_strategy.py)"
    )


def train_dpo(train, val, out: Path, recipe: dict, seed: int) -> Path:
    "`train_director_dpo` on pairs: each training state's directive over the same directive naming each other persona."
    from mascot.training.pairs import save_pairs
    from mascot.stage2.director_dpo import DirectorDPOConfig, train_director_dpo
    from mascot.stage2.director_sft import strategy_directive

    rows = []
    for s in train:
        chosen = strategy_directive(s["strategy"], s["label"], SUPPORT_ROSTER)
        for other in (n for n in NAMES if n != s["label"]):
            rows.append(
                {
                    "prompt": prompt_of(s),
                    "chosen": [{"role": "assistant", "content": chosen}],
                    "rejected": [
                        {"role": "assistant", "content": strategy_directive(s["strategy"], other, SUPPORT_ROSTER)}
                    ],
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
            max_steps=recipe["dpo_max_steps"],
            learning_rate=recipe["dpo_lr"],
            per_device_train_batch_size=recipe["batch"],
            trl={"gradient_accumulation_steps": recipe["grad_accum"]},
            collapse_probe_states=recipe["probe_states"],
            **lora(recipe),
        )
    )


def episode_state(s: dict) -> dict:
    "The state as a branching folder's states.jsonl holds it (the trainer's held-out check plays its directives from it)."
    from mascot.core.records import Turn
    from mascot.domain.datasets import Context

    turns = [
        Turn(i, 0, SUPPORT_ROSTER.user_label, t, turn_type="user") if w == "0" else Turn(i, 0, SUPPORTER, t)
        for i, (w, t) in enumerate(s["history"])
    ]
    ctx = Context("ESConv", s["id"], "train", situation=SITUATION)
    return {
        "context": ctx.to_dict(),
        "turns": [t.to_dict() for t in turns],
        "round_id": 0,
        "emotion_trajectory": [],
        "big_five": None,
    }


def train_grpo(train, val, out: Path, recipe: dict, seed: int, start: Path) -> Path:
    "`train_director_grpo` from the SFT adapter `start`, the class-weighted label reward in the group RM's place, no format reward."
    from mascot.stage2.director_grpo import train_director_grpo
    from mascot.stage2.director_grpo_config import DirectorGRPOConfig
    from mascot.stage2.director_rewards import make_label_reward

    if not (start / "adapter_config.json").exists():
        raise FileNotFoundError(f"{start}: no SFT adapter of seed {seed} to start from (run the sft method first)")
    data = out.parent / f"{out.name}_states"
    data.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": prompt_of(s), "state": episode_state(s), "context_id": s["id"]} for s in train]
    (data / "states.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    g = recipe["grpo_generations"]
    cfg = DirectorGRPOConfig(
        dataset="ESConv",
        episode_dataset_path=str(data),
        group_reward_model_path="none: the label reward judges",
        output_dir=str(out.parent),
        run_name=out.name,
        seed=seed,
        init_adapter_path=str(start),
        format_reward="none",
        max_steps=recipe["grpo_max_steps"],
        learning_rate=recipe["grpo_lr"],
        num_generations=g,
        per_device_train_batch_size=g * recipe["grpo_prompts_per_micro_step"],
        gradient_accumulation_steps=recipe["grad_accum"],
        max_completion_length=recipe["grpo_max_completion"],
        temperature=1.0,
        beta=0.0,
        holdout_fraction=0.0,  # one state held out: the trainer's own check
        eval_samples_per_state=1,
        collapse_probe_states=recipe["probe_states"],
        **lora(recipe),
    )
    labels = {s["id"]: s["label"] for s in train}
    return train_director_grpo(cfg, reward=make_label_reward(labels, SUPPORT_ROSTER))


def training_summary(d: Path) -> dict:
    "What the trainer recorded that says how training went: steps, the kept step and validation curve, the collapse watch's last probe."
    m = json.loads((d / "mascot_metadata.json").read_text()) if (d / "mascot_metadata.json").exists() else {}
    hist = json.loads((d / "log_history.json").read_text()) if (d / "log_history.json").exists() else []
    keys = ("loss", "rewards/label_reward/mean")
    out = {
        "steps": m.get("steps"),
        "training_curve": [
            {"step": h.get("step"), **{k: round(h[k], 4) for k in keys if k in h}}
            for h in hist
            if any(k in h for k in keys)
        ],
    }
    if m.get("early_stopping"):
        out["early_stopping"] = {k: v for k, v in m["early_stopping"].items() if k != "choice_at_best"}
    probes = (m.get("collapse_watch") or {}).get("probes") or []
    if probes:
        out["collapse_watch_last"] = probes[-1]
    return out


# ---- the record ----
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
            "load_average_at_write": [round(x, 2) for x in os.getloadavg()],
        },
        "commit": git("rev-parse", "--short", "HEAD"),
        "mascot_files_differing_from_commit": len(git("status", "--porcelain", "--", "mascot").splitlines()),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def sha256(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


# ---- the run ----
RECIPE = dict(  # sized so that one seed of every method runs within 60 minutes on 2 cores (the docstring's Budget)
    batch=4,
    grad_accum=1,
    lora_r=16,
    lora_targets="all-linear",
    probe_states=8,
    eval_per_persona=12,
    sft_max_steps=16,
    sft_lr=1e-3,
    sft_eval_steps=4,
    sft_patience=2,
    dpo_max_steps=8,
    dpo_lr=5e-4,
    grpo_max_steps=6,
    grpo_lr=1e-4,
    grpo_generations=4,
    grpo_prompts_per_micro_step=2,
    grpo_max_completion=10,
)


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
        help="a file in the same format scored once per (method, seed); unset: a test split of --train-path",
    )
    a("--output", default=str(ROOT / "bench/results/director_strategy.json"), help="the JSON written")
    a(
        "--work-dir",
        default=None,
        help="the base pass, per (method, seed) records and trained adapters, for resuming; default: a folder in the temp dir named after --output",
    )
    a("--seeds", type=int, nargs="+", default=[0, 1, 2])
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
        default=0,
        help="test states scored per conversation (drawn once); 0: all",
    )
    a(
        "--val-states-per-conversation",
        type=int,
        default=0,
        help="validation states per conversation (drawn once); 0: all",
    )
    a(
        "--train-states",
        type=int,
        default=0,
        help="at most this many training states (drawn once with SPLIT_SEED; a smoke run); 0: all",
    )
    a(
        "--validation-only",
        action="store_true",
        help="score the validation states in place of the test states (a look at a recipe); never the test split",
    )
    a(
        "--score-validation",
        action="store_true",
        help="also score the trained directors on every validation state (reported, chooses nothing; about 5 minutes a seed)",
    )
    a("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: every core)")
    for k, v in RECIPE.items():
        a(f"--{k.replace('_', '-')}", type=type(v), default=v)
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
    if a.train_states and a.train_states < len(train):
        keep = {s["id"] for s in random.Random(SPLIT_SEED).sample(train, a.train_states)}
        train = [s for s in train if s["id"] in keep]
    val = cap_per_conversation(part["validation"], a.val_states_per_conversation, SPLIT_SEED)
    test = cap_per_conversation(part["test"], a.test_states_per_conversation, SPLIT_SEED)
    if a.validation_only:
        test = val
    if not (train and val and test):
        sys.exit(
            f"{a.train_path}: too few conversations for training, validation and test ({len(train)}, {len(val)}, {len(test)} states)"
        )
    es_val = per_persona(val, a.eval_per_persona, SPLIT_SEED)
    out = Path(a.output)
    work = Path(
        a.work_dir
        or Path(tempfile.gettempdir())
        / f"director_strategy-{hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:8]}"
    )
    (work / "records").mkdir(parents=True, exist_ok=True)
    print(f"work dir {work}; {len(train)} training, {len(val)} validation, {len(test)} test states", flush=True)
    recipe = {k: getattr(a, k) for k in RECIPE}
    files = {"train": a.train_path, **({"test": a.test_path} if a.test_path else {})}
    labels = lambda ss: [s["label"] for s in ss]
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
        "states_scored": f"{a.test_states_per_conversation or 'every'} state(s) per test conversation, {a.val_states_per_conversation or 'every'} per validation conversation",
        "n_states": {
            "train": len(train),
            "validation": len(val),
            "test": len(test),
            "early_stopping_validation": len(es_val),
        },
        "labels": {
            k: {n: labels(v).count(n) for n in NAMES}
            for k, v in (("train", train), ("validation", val), ("test", test))
        },
        "seeds": a.seeds,
        "recipe": recipe,
        "scored": "validation states only (--validation-only)" if a.validation_only else "test states",
        "choices_on_validation": "C of tfidf and probe by validation balanced accuracy; the SFT step by early stopping on the validation "
        f"loss (decision-weighted, class-balanced) of {len(es_val)} validation states ({a.eval_per_persona} per persona, drawn with seed "
        f"{SPLIT_SEED}); GRPO and DPO: the fixed recipe, sized by the CPU budget before any score",
        "probe": f"StandardScaler + LogisticRegression(class_weight='balanced') on hidden state {PROBE_LAYERS['mean']} averaged over the "
        f"state's own tokens and hidden state {PROBE_LAYERS['last']} at the last token (the frozen base model), fitted on every training state",
        "tfidf": f"LogisticRegression(class_weight='balanced') on TF-IDF of {', '.join(TFIDF_FIELDS)} (word 1-2-grams, min_df 2, sublinear) and the last speaker",
        "trained": "sft: train_director_sft with eval_rows; grpo: train_director_grpo from the seed's SFT adapter with make_label_reward, no "
        "format reward; dpo: train_director_dpo on each training state's directive over each other persona's; all on every training "
        "state, class-balanced by the trainers, the speaker name's tokens weighted (SFT, DPO)",
        "metric": "balanced accuracy and macro-F1; 95% percentile bootstrap over test conversations (4,000 resamples, paired across methods, seeds averaged within a resample)",
    }

    base = None
    if any(m in a.methods for m in ("untrained", "probe")):
        base = base_pass(work, {"train": train, "validation": val, "test": test})

    def rec_path(m, seed):
        return work / "records" / f"{m}_seed{seed}.json"

    def record(m, seed, test_preds, val_preds=None, **extra):
        r = {
            "method": m,
            "seed": seed,
            **scores(labels(test), test_preds),
            "n_states": len(test),
            "n_conversations": len({s["conversation"] for s in test}),
        }
        if val_preds is not None:
            v = scores(labels(val), val_preds)
            r["validation"] = {k: v[k] for k in ("balanced_accuracy", "macro_f1", "picks")}
        r.update(extra)
        rec_path(m, seed).write_text(json.dumps({**r, "test_preds": list(test_preds)}))
        written_here.append(f"{m}_seed{seed}")
        write()
        print({k: v for k, v in r.items() if k not in ("training",)}, flush=True)

    def write():
        recs = [json.loads(p.read_text()) for p in sorted((work / "records").glob("*.json"))]
        recs = [r for r in recs if r["method"] in METHODS and r["seed"] in a.seeds]
        boot = Bootstrap(test)
        curves, summ = {}, {}
        for m in METHODS:
            ok = [r for r in recs if r["method"] == m and "test_preds" in r and not r.get("failed")]
            failed = sum(r["method"] == m and bool(r.get("failed")) for r in recs)
            if ok:
                preds = [r["test_preds"] for r in ok]
                curves[m] = {k: boot.curve(preds, k) for k in ("balanced_accuracy", "macro_f1")}
                summ[m] = {k: summary_of(v) for k, v in curves[m].items()}
                summ[m].update(n_seeds=len(ok), n_failed=failed)
                if all("validation" in r for r in ok):
                    summ[m]["validation_balanced_accuracy_mean"] = round(
                        float(np.mean([r["validation"]["balanced_accuracy"] for r in ok])), 4
                    )
            elif failed:
                summ[m] = {"n_seeds": 0, "n_failed": failed}
        consts = [m for m in REFERENCES if m.startswith("constant_") and m in curves]
        if consts:
            summ["best_constant"] = max(
                consts, key=lambda m: (round(curves[m]["balanced_accuracy"][-1], 6), m == "constant_catalyst")
            )
        for m in TRAINED + ["untrained"]:
            if m in curves:
                for ref in (summ.get("best_constant"), "position", "tfidf", "probe", "untrained"):
                    if ref in curves and ref != m:
                        name = "best_constant" if ref.startswith("constant_") else ref
                        summ[m][f"diff_vs_{name}"] = {}
                        for k in ("balanced_accuracy", "macro_f1"):
                            d = summary_of(curves[m][k] - curves[ref][k])
                            summ[m][f"diff_vs_{name}"][k] = {**d, "excludes_0": d["ci95"][0] > 0 or d["ci95"][1] < 0}
        secs = lambda m, k: [r[k] for r in recs if r["method"] == m and r.get(k) is not None]
        per_method = {
            m: {
                "train_seconds": secs(m, "train_seconds"),
                "score_seconds": secs(m, "score_seconds"),
                "seconds": secs(m, "seconds"),
                "train_cpu_seconds": secs(m, "train_cpu_seconds"),
                "score_cpu_seconds": secs(m, "score_cpu_seconds"),
            }
            for m in METHODS
            if any(r["method"] == m for r in recs)
        }
        base_s = {k: round(float(v["seconds"]), 1) for k, v in (base or {}).items()}
        base_cpu = {k: round(float(v["cpu_seconds"]), 1) for k, v in (base or {}).items() if "cpu_seconds" in v}
        one_seed = sum(base_s.values()) + sum(float(np.mean(v["seconds"])) for v in per_method.values() if v["seconds"])
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
                "base_pass_seconds": base_s,
                "base_pass_cpu_seconds": base_cpu,
                "per_method": per_method,
                "one_seed_seconds": round(one_seed, 1),
                "this_invocation": {
                    "seconds": round(time.time() - t0, 1),
                    "records_written": len(written_here),
                    "records_resumed": len(recs) - len(written_here),
                    "threads": a.threads,
                },
                "note": "wall times on the machine in provenance, load not controlled; cpu_seconds: the process's CPU time (all its "
                "threads), which load changes less; one_seed_seconds: the base pass (computed once, shared by the seeds) and each "
                "method's mean seconds per seed; a resumed run's total spans invocations",
            },
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")
        os.replace(tmp, out)

    written_here = []
    for seed in a.seeds:
        for m in [m for m in METHODS if m in a.methods]:
            if rec_path(m, seed).exists():
                continue
            t, cpu = time.time(), time.process_time()
            try:
                if m.startswith("constant_"):
                    n = "The " + m.split("_")[1].title()
                    record(m, seed, [n] * len(test), [n] * len(val), seconds=0.0)
                elif m == "random":
                    rng = random.Random(seed)
                    record(m, seed, [rng.choice(NAMES) for _ in test], [rng.choice(NAMES) for _ in val], seconds=0.0)
                elif m == "position":
                    record(
                        m,
                        seed,
                        position_rule(train, test),
                        position_rule(train, val),
                        seconds=round(time.time() - t, 1),
                    )
                elif m == "tfidf":
                    Xtr, Xval, Xte = tfidf_features(train, val, test)
                    lr, C, curve = fit_lr(Xtr, labels(train), Xval, labels(val))
                    record(
                        m,
                        seed,
                        list(lr.predict(Xte)),
                        list(lr.predict(Xval)),
                        C_chosen_on_validation=C,
                        validation_curve=curve,
                        seconds=round(time.time() - t, 1),
                    )
                elif m == "probe":
                    f = lambda k: base[k]["features"]
                    lr, C, curve = fit_lr(f("train"), labels(train), f("validation"), labels(val), scale=True)
                    record(
                        m,
                        seed,
                        list(lr.predict(f("test"))),
                        list(lr.predict(f("validation"))),
                        C_chosen_on_validation=C,
                        validation_curve=curve,
                        n_train=len(train),
                        seconds=round(time.time() - t, 1),
                    )
                elif m == "untrained":
                    record(
                        m,
                        seed,
                        [str(x) for x in base["test"]["choice"]],
                        [str(x) for x in base["validation"]["choice"]],
                        seconds=0.0,
                        note="the base pass's choices (its seconds under timing.base_pass_seconds)",
                    )
                else:
                    d = work / "adapters" / f"{m}_seed{seed}"
                    if m == "grpo":
                        train_grpo(train, es_val, d, recipe, seed, work / "adapters" / f"sft_seed{seed}")
                    else:
                        {"sft": train_sft, "dpo": train_dpo}[m](train, es_val, d, recipe, seed)
                    train_s, train_cpu = time.time() - t, time.process_time() - cpu
                    ch = Chooser(str(d))
                    tp = [r["choice"] for r in ch.choose(test)]
                    vp = [r["choice"] for r in ch.choose(val)] if a.score_validation else None
                    record(
                        m,
                        seed,
                        tp,
                        vp,
                        n_train_states=len(train),
                        train_seconds=round(train_s, 1),
                        score_seconds=round(time.time() - t - train_s, 1),
                        seconds=round(time.time() - t, 1),
                        train_cpu_seconds=round(train_cpu, 1),
                        score_cpu_seconds=round(time.process_time() - cpu - train_cpu, 1),
                        training=training_summary(d),
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
