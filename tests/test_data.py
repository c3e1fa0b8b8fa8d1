"Loaders on the demo datasets the package ships, and on real dataset samples (shared/data, see its README) when they are present."

import json
import pytest
from conftest import real_samples
from mascot.domain.datasets import DataFormatError, demo_data_dir
from mascot.domain.dataset_formats import ED_VALENCE
from mascot.domain.dataset_loading import load_contexts, few_shot_examples

DATA = demo_data_dir()
REAL = real_samples()
# each case: (folder, expected counts); the real samples add their own expectations when present
ED_CASES = [pytest.param(DATA, 12, id="demo")] + ([pytest.param(REAL, 40, id="real")] if REAL else [])
ESCONV_CASES = [pytest.param(DATA, 16, {11, 2, 3}, id="demo")] + (
    [pytest.param(REAL, 28, {20, 4}, id="real")] if REAL else []
)
QMSUM_CASES = [
    pytest.param(DATA, {"demo_product_meeting": "Product", "demo_committee_meeting": "Committee"}, id="demo")
] + (
    [
        pytest.param(
            REAL,
            {"Bed016": "Academic", "education_17": "Committee", "IS1003a": "Product", "ES2011a": "Product"},
            id="real",
        )
    ]
    if REAL
    else []
)


@pytest.mark.parametrize("data,n", ED_CASES)
def test_ed_sample(data, n):
    ctxs = load_contexts("ED", "train", data / "empathetic_dialogues")
    assert len(ctxs) == n
    assert all(c.valence in ("positive", "negative", "neutral") and c.valence == ED_VALENCE[c.emotion] for c in ctxs)
    assert all(c.opening and "_comma_" not in c.prompt_text() for c in ctxs)


@pytest.mark.parametrize("data,n,sizes", ESCONV_CASES)
def test_esconv_sample_splits(data, n, sizes):
    splits = {s: load_contexts("ESConv", s, data / "esconv") for s in ("train", "valid", "test")}
    ids = [c.context_id for cs in splits.values() for c in cs]
    assert len(ids) == len(set(ids)) == n
    assert {len(cs) for cs in splits.values()} == sizes  # the seeded 70/15/15 split
    assert all(c.opening and c.reference and c.initial_intensity in range(1, 6) for cs in splits.values() for c in cs)


@pytest.mark.parametrize("data,domains", QMSUM_CASES)
def test_qmsum_sample_domains(data, domains):
    ctxs = load_contexts("QMSum", "test", data / "qmsum")
    assert {c.meeting: c.domain for c in ctxs} == domains
    assert all(c.transcript and c.query and c.reference for c in ctxs)


def test_seeded_sampling_and_few_shot():
    a = load_contexts("ED", "train", DATA / "empathetic_dialogues", num_samples=7, seed=3)
    assert [c.context_id for c in a] == [
        c.context_id for c in load_contexts("ED", "train", DATA / "empathetic_dialogues", num_samples=7, seed=3)
    ]
    assert [c.context_id for c in a] != [
        c.context_id for c in load_contexts("ED", "train", DATA / "empathetic_dialogues", num_samples=7, seed=4)
    ]
    shots = few_shot_examples("ESConv", DATA / "esconv", k=3, seed=0, exclude_ids=[c.context_id for c in a])
    assert len(shots) == 3 and all(s.split == "train" and s.reference for s in shots)


def test_malformed_files_name_file_line_and_field(tmp_path):
    (tmp_path / "train.csv").write_text(
        "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\nhit:0_conv:1,1,sad,p,1\n"
    )
    with pytest.raises(DataFormatError, match=r"train\.csv:2: missing field 'utterance'"):
        load_contexts("ED", "train", tmp_path)
    recs = json.loads((DATA / "esconv" / "ESConv.json").read_text())[:4]
    recs[3]["dialog"] = None
    (tmp_path / "ESConv.json").write_text(json.dumps(recs))
    with pytest.raises(DataFormatError, match=r"ESConv\.json\[3\]: field 'dialog'"):
        load_contexts("ESConv", "test", tmp_path)


def test_a_file_with_no_context_for_the_split_is_an_error_naming_it(tmp_path):
    from mascot.domain.datasets import NoContextsError

    (tmp_path / "test.csv").write_text("conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags\n")
    with pytest.raises(NoContextsError, match=r"test\.csv: no conversations \(only the header\)"):
        load_contexts("ED", "test", tmp_path)
    (tmp_path / "ESConv.json").write_text("[]")
    with pytest.raises(NoContextsError, match=r"ESConv\.json: no conversations \(an empty list\)"):
        load_contexts("ESConv", "test", tmp_path)
