"""Write ESConv conversations (`ESConv.json`, the authors' original format) as a strategy file in the format of their `*WithStrategy_short.tsv`,
so `bench/director_strategy.py --test-path` can score conversations that are not in its training file.

Each supporter turn with a strategy and something before it becomes one line: the window of the last WINDOW utterances up to and including it (as the authors'
short files keep), segments `<float> <speaker 0|1> <turn index> <text>` joined by ` EOS `, every supporter text led by its strategy in
brackets, spelled as in the authors' files (`[Questions]`, `[Other]`). The float is 1.0 on the state's own turn, 0.0 before it. Lines end
in CRLF. With --exclude, a conversation is left out when any of its supporter utterances of 40 characters or more appears in that file
(the authors' splits share no conversation, so this finds a sample's overlap with their dev split).

    python bench/esconv_strategy_file.py ../shared/data/esconv/ESConv.json --exclude ../shared/data/esconv_strategy/dev.tsv --output FILE
"""

import argparse, json, sys
from pathlib import Path

WINDOW = 5  # segments per line in the authors' short files (fewer at a conversation's start)
SPELLING = {
    "Question": "Questions",
    "Others": "Other",
}  # original strategy.json names -> the *WithStrategy_short.tsv spelling
MIN_OVERLAP_CHARS = 40  # shorter supporter turns ("Hello", "You're welcome") recur across conversations


def _clean(text: str) -> str:
    "One line's segment text: whitespace runs (newlines included) to single spaces."
    return " ".join(str(text).split())


def strategy_lines(conversation: dict) -> list[str]:
    "One line per supporter turn with a strategy, in the authors' short format."
    segs = []
    for i, u in enumerate(conversation["dialog"]):
        sp = "1" if u["speaker"] == "supporter" else "0"
        strategy = (u.get("annotation") or {}).get("strategy") if sp == "1" else None
        text = _clean(u["content"])
        segs.append((sp, i, f"[{SPELLING.get(strategy, strategy)}] {text}" if strategy else text))
    lines = []
    for k, (sp, i, text) in enumerate(segs):
        if sp == "1" and text.startswith("[") and k > 0:  # the authors' files have no state without history
            window = segs[max(0, k - WINDOW + 1) : k + 1]
            lines.append(
                " EOS ".join(
                    f"{1.0 if j == len(window) - 1 else 0.0:.1f} {s} {t} {x}" for j, (s, t, x) in enumerate(window)
                )
            )
    return lines


def overlaps(conversation: dict, text: str) -> bool:
    "Whether a supporter utterance of this conversation (MIN_OVERLAP_CHARS or more) occurs in `text`."
    return any(
        u["speaker"] == "supporter" and len(_clean(u["content"])) >= MIN_OVERLAP_CHARS and _clean(u["content"]) in text
        for u in conversation["dialog"]
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "esconv_json", help="ESConv.json: a JSON list of conversations with dialog[] {speaker, annotation, content}"
    )
    ap.add_argument("--exclude", default=None, help="a strategy file whose conversations are left out")
    ap.add_argument("--output", required=True, help="the strategy file written (.tsv)")
    a = ap.parse_args(argv)
    try:
        convs = json.loads(Path(a.esconv_json).read_text(encoding="utf-8"))
        if not isinstance(convs, list) or not all(isinstance(c, dict) and "dialog" in c for c in convs):
            raise ValueError("not a list of conversations with a 'dialog' field")
    except (OSError, ValueError) as e:
        sys.exit(f"{a.esconv_json}: {e}")
    seen = " ".join(Path(a.exclude).read_text(encoding="utf-8").split()) if a.exclude else ""
    kept = [i for i, c in enumerate(convs) if not (seen and overlaps(c, seen))]
    lines = [ln for i in kept for ln in strategy_lines(convs[i])]
    if not lines:
        sys.exit(f"{a.esconv_json}: no supporter turn with a strategy left to write")
    Path(a.output).write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    left_out = [i for i in range(len(convs)) if i not in kept]
    print(f"{a.output}: {len(lines)} states from {len(kept)} conversations; left out (in --exclude): {left_out}")
    return kept


if __name__ == "__main__":
    main()
