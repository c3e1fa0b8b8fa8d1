"The main job end to end: `mascot run configs/smoke.yaml` on the embedded model, then the results site opened in headless Chromium."

import html, json, re, time
from pathlib import Path
import pytest
from browser import browse, assert_healthy, webdriver_session, console_errors

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


def test_smoke_run_has_every_stage_and_figure(smoke_run):
    from mascot.stages import STAGES

    for st in STAGES:
        sdir = smoke_run / st.dir
        assert (sdir / "executed.ipynb").exists(), st.key
        assert json.loads((sdir / "run_summary.json").read_text())["status"] == "completed", st.key
        meta = json.loads((sdir / "meta.json").read_text())
        assert meta["start"] and meta["end"] and meta["versions"]["torch"]
        assert meta["seconds"] > 0 and 100 < meta["peak_rss_mb"] < 64_000, (
            st.key,
            meta.get("peak_rss_mb"),
        )  # the kernel's own peak memory
    figs = sorted((smoke_run / "figures").glob("*/*.png"))
    assert {p.parent.name for p in figs} >= {
        "f01_persona_table_ed",
        "f02_collective_table_ed",
        "f04_ablation",
        "f06_big_five_heatmap",
    }
    # the persona table's numbers are the judge table's: each conversation's judged turns averaged, then the conversations
    import pandas as pd
    from mascot.evaluation.judged_scores import PAPER_METRICS

    scores = pd.read_csv(smoke_run / "31_judge_all" / "out" / "judge_scores.csv")
    f01 = pd.read_csv(smoke_run / "figures" / "f01_persona_table_ed" / "f01_persona_table_ed.csv")
    row = f01.iloc[0]
    kind, criterion = PAPER_METRICS[row.metric]
    sel = scores[
        (scores.kind == kind)
        & (scores.system == row.system)
        & (scores.criterion == criterion)
        & (scores.group == row.group)
        & (scores.judge == row.judge)
    ]
    per_conversation = sel.groupby("conv_id").score.mean()
    assert abs(per_conversation.mean() - row["mean"]) < 1e-6 and len(per_conversation) == row["n_contexts"]


def test_smoke_run_trained_and_served_the_adapters(smoke_run):
    "The training stages moved their adapters' weights, and the evaluation served them by alias (the role trace proves which id each role called)."
    for stage in ("12_speaker_grpo", "13_sft", "22_director_grpo", "23_director_dpo"):
        path = Path(json.loads((smoke_run / stage / "outputs.json").read_text())["path"])
        meta = json.loads((path / "mascot_metadata.json").read_text())
        assert meta["max_weight_change"] > 0 and meta["steps"] >= 1, stage
        assert (path / "adapter_model.safetensors").exists(), stage
    from mascot.training.provenance import data_hash

    grpo = json.loads((smoke_run / "22_director_grpo" / "outputs.json").read_text())["path"]
    meta = json.loads(Path(grpo, "mascot_metadata.json").read_text())
    # provenance: the hash of the states the director GRPO trained on (the branching folder also holds DPO's pairs)
    assert meta["data_sha256"] == data_hash(Path(meta["episode_dataset_path"]) / "states.jsonl")
    for stage in ("11_reward_model", "21_group_reward_model"):
        meta = json.loads(
            (
                Path(json.loads((smoke_run / stage / "outputs.json").read_text())["path"]) / "mascot_metadata.json"
            ).read_text()
        )
        assert 0 <= meta["heldout_accuracy_after"] <= 1 and meta["heldout_contexts"], stage
    files = json.loads((smoke_run / "30_generate" / "outputs.json").read_text())["files"]
    assert set(files) == {"mascot", "mascot-g", "mascot-i", "mascot-c", "mascot-p", "zero-shot", "few-shot", "sft"}
    rec = json.loads(open(files["mascot"]).readline())
    assert rec["metadata"]["director_model"] == "mascot-director" and set(rec["metadata"]["adapters"]) == {
        "director",
        "speaker",
    }
    assert json.loads(open(files["sft"]).readline())["metadata"]["speaker_model"] == "mascot-sft"


# ---- the results site, built once from the smoke run and opened in headless Chromium


@pytest.fixture(scope="module")
def site(smoke_run, tmp_path_factory) -> Path:
    from mascot.site.build import build_site

    t0 = time.time()
    idx = build_site([smoke_run], output_dir=tmp_path_factory.mktemp("site") / "_site")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "site_build.txt").write_text(
        f"mascot site on {smoke_run}: {time.time() - t0:.1f} s\n"
    )  # a record, not an assert
    return idx


def run_page(site: Path, smoke_run: Path) -> Path:
    return site.parent / "runs" / smoke_run.name / "index.html"


def eval_records(smoke_run: Path) -> dict[str, list[dict]]:
    files = json.loads((smoke_run / "30_generate" / "outputs.json").read_text())["files"]
    from mascot.site.sections import locate

    return {s: [json.loads(l) for l in open(locate(p, smoke_run)) if l.strip()] for s, p in files.items()}


def judge_dir(smoke_run: Path) -> Path:
    from mascot.site.sections import locate

    return locate(json.loads((smoke_run / "31_judge_all" / "outputs.json").read_text())["output_dir"], smoke_run)


def conv_list(dom: str) -> str:
    "The DOM of the conversation list only (the side-by-side panel holds copies of two conversations)."
    return dom[dom.index('id="conv-list"') :]


def test_site_lists_run_and_shows_figures(site, smoke_run, tmp_path):
    dom = browse(site.resolve().as_uri(), tmp_path, screenshot=ARTIFACTS / "site_index.png")
    assert "smoke" in dom and "completed" in dom
    assert_healthy(dom)
    # the headline table compares runs: one column per (run, rubric), one row per judged system
    assert (
        f"{smoke_run.name}<br><small>persona Overall</small>" in dom
        and f"{smoke_run.name}<br><small>collective Overall</small>" in dom
    )
    import pandas as pd

    judged = set(pd.read_csv(judge_dir(smoke_run) / "judge_scores.csv")["system"])
    assert judged and all(f"<td>{s}</td>" in dom for s in judged)
    page = run_page(site, smoke_run)
    ARTIFACTS.mkdir(exist_ok=True)
    dom = browse(page.resolve().as_uri(), tmp_path, screenshot=ARTIFACTS / "site_run_page.png")
    total = int(re.search(r'data-images-total="(\d+)"', dom).group(1))
    loaded = int(re.search(r'data-images-loaded="(\d+)"', dom).group(1))
    assert total >= 4 and loaded == total, (loaded, total)
    assert_healthy(dom, min_images=4)
    assert (ARTIFACTS / "site_run_page.png").stat().st_size > 10_000
    nb_pages = list((site.parent / "runs" / smoke_run.name / "notebooks").glob("*.html"))
    assert len(nb_pages) >= 10
    # provenance: each stage's wall time and peak memory, the package versions, the models per role
    meta = json.loads((smoke_run / "30_generate" / "meta.json").read_text())
    assert f"{meta['peak_rss_mb']} MB" in dom and f"<td>torch</td><td>{meta['versions']['torch']}</td>" in dom
    assert "<td>mascot</td><td>director</td><td>mascot-director" in dom


def test_site_shows_every_conversation_with_directives_and_scores(site, smoke_run, tmp_path):
    recs = eval_records(smoke_run)
    dom = browse(
        run_page(site, smoke_run).resolve().as_uri() + "#conversations",
        tmp_path,
        screenshot=ARTIFACTS / "site_conversations.png",
    )
    assert_healthy(dom)
    lst = conv_list(dom)
    assert lst.count('<article class="conv"') == sum(map(len, recs.values()))
    for system, rs in recs.items():
        assert lst.count(f'data-system="{system}"') == len(rs), system
    directed = sum(1 for rs in recs.values() for r in rs for t in r["turns"] if t.get("directive"))
    fallbacks = sum(
        1 for rs in recs.values() for r in rs for t in r["turns"] if t.get("directive_source") == "fallback"
    )
    # every directive beside its agent turn, a fallback marked as one
    assert directed > 0 and lst.count('class="directive"') + lst.count('class="directive fallback"') == directed
    assert lst.count('class="directive fallback"') == fallbacks
    r0 = recs["mascot"][0]
    if r0.get("user_big_five"):
        assert html.escape(r0["user_big_five"], quote=False) in lst
    assert all(html.escape(e, quote=False) in lst for e in r0.get("emotion_trajectory", []))
    # the judge's reasons for a judged turn are on the page
    stem = Path(json.loads((smoke_run / "30_generate" / "outputs.json").read_text())["files"]["mascot"]).stem
    lines = [json.loads(l) for l in open(judge_dir(smoke_run) / f"scores_persona_{stem}.jsonl")]
    reasons = [r for l in lines for i in l["items"] if not i.get("failed") for r in i["reasons"].values() if r.strip()]
    assert reasons and all(html.escape(r, quote=False) in lst for r in reasons)
    # the side-by-side panel starts filled with two systems on the same context
    left, right = (
        dom[dom.index('id="c-left"') : dom.index('id="c-right"')],
        dom[dom.index('id="c-right"') : dom.index('id="conv-list"')],
    )
    assert '<article class="conv"' in left and '<article class="conv"' in right


def test_site_opens_one_conversation_by_its_link(site, smoke_run, tmp_path):
    r = eval_records(smoke_run)["mascot"][0]
    cid = f"conv-mascot-{r.get('conv_id', r.get('id'))}"
    dom = browse(
        run_page(site, smoke_run).resolve().as_uri() + "#" + cid,
        tmp_path,
        screenshot=ARTIFACTS / "site_conversation.png",
    )
    assert_healthy(dom)
    arts = re.findall(r'<article class="conv"[^>]*>', conv_list(dom))
    shown = [a for a in arts if " hidden" not in a]
    assert len(shown) == 1 and f'id="{cid}"' in shown[0], shown
    art = conv_list(dom)[conv_list(dom).index(f'id="{cid}"') :]
    art = art[: art.index("</article>")]
    assert "<details open" in art and "<td>Overall</td>" in art  # its judge scores are open
    left = dom[dom.index('id="c-left"') : dom.index('id="c-right"')]
    assert 'data-system="mascot"' in left and f'data-ctx="{cid[len("conv-mascot-") :]}"' in left
    assert re.search(r'<section class="tab" id="conversations">', dom) and re.search(
        r'<section class="tab" id="training" hidden', dom
    )


def test_site_training_section_has_curves_or_says_why_not(site, smoke_run, tmp_path):
    from mascot.site.sections import locate

    dom = browse(
        run_page(site, smoke_run).resolve().as_uri() + "#training", tmp_path, screenshot=ARTIFACTS / "site_training.png"
    )
    assert_healthy(dom)
    sec = dom[dom.index('<section class="tab" id="training"') : dom.index('<section class="tab" id="judge"')]
    trained = []
    for d in sorted(smoke_run.iterdir()):
        out = json.loads((d / "outputs.json").read_text()) if (d / "outputs.json").exists() else {}
        p = locate(out.get("path"), smoke_run)
        if p and (p / "mascot_metadata.json").exists():
            trained.append((d.name, p))
    assert {"11_reward_model", "12_speaker_grpo", "13_sft", "22_director_grpo", "23_director_dpo"} <= {
        n for n, _ in trained
    }
    for name, p in trained:
        block = sec[sec.index(f'id="train-{name}"') :]
        block = block[: block.index('class="stage-train"', 1)] if 'class="stage-train"' in block[1:] else block
        meta = json.loads((p / "mascot_metadata.json").read_text())
        if (p / "log_history.json").exists():
            log = json.loads((p / "log_history.json").read_text())
            assert block.count('<svg class="curve"') >= 1, name
            if any("loss" in h for h in log):
                assert 'data-key="loss"' in block, name
            for fn in {k.split("/")[1] for h in log for k in h if re.fullmatch(r"rewards/.+/mean", k)}:
                assert f"■ {fn}<" in block, (name, fn)
        elif meta.get("reward_log") or meta.get("log"):
            assert block.count('<svg class="curve"') >= 1, name
        else:
            assert "No training log" in block, name
        for k in ("heldout_accuracy_after", "trained_mean_rm", "train_loss"):
            if isinstance(meta.get(k), (int, float)):
                assert f"<td>{k}</td>" in block, (name, k)


def test_site_judge_reliability(site, smoke_run, tmp_path):
    import pandas as pd

    dom = browse(
        run_page(site, smoke_run).resolve().as_uri() + "#judge", tmp_path, screenshot=ARTIFACTS / "site_judge.png"
    )
    assert_healthy(dom)
    metrics = [json.loads(p.read_text()) for p in judge_dir(smoke_run).glob("metrics_*.json")]
    embedded = any("135m" in j.lower() for m in metrics for j in m["judges"])
    assert ('id="judge-warning"' in dom) == embedded
    assert re.search(r'id="parse-rate".*?\d+\.\d%', dom, re.S)
    scores = pd.read_csv(judge_dir(smoke_run) / "judge_scores.csv")
    dist = dom[dom.index('id="score-dist"') :]
    dist = dist[: dist.index("</table>")]
    assert dist.count('<svg class="hist"') == len(scores.groupby(["kind", "criterion"]))


def test_site_paper_tables_are_html_tables(site, smoke_run, tmp_path):
    import pandas as pd

    dom = browse(
        run_page(site, smoke_run).resolve().as_uri() + "#tables", tmp_path, screenshot=ARTIFACTS / "site_tables.png"
    )
    assert_healthy(dom, min_images=4)
    csvs = sorted((smoke_run / "figures").glob("*/*.csv"))
    assert csvs
    for c in csvs:
        if pd.read_csv(c).empty:
            assert f"{c.stem}: no data" in dom
        else:
            assert f'<table class="sortable data" id="tbl-{c.stem}">' in dom, c.stem
            assert f'href="figures/{c.parent.name}/{c.name}"' in dom
    f01 = pd.read_csv(smoke_run / "figures/f01_persona_table_ed/f01_persona_table_ed.csv").iloc[0]
    assert f'data-v="{f01["mean"]}"' in dom  # the exact number behind the rounded cell
    for d in {c.parent for c in csvs if (c.parent / "executed.ipynb").exists()}:
        assert (
            f'href="notebooks/figures-{d.name}.html"' in dom
            and (run_page(site, smoke_run).parent / "notebooks" / f"figures-{d.name}.html").exists()
        )


# Run in the page at a given width: what sticks out past the page's column (the body's content box) outside any scroll box, and the
# page's own horizontal scroll width; a wide table inside its `.tablebox` scrolls there and does not count.
OVERFLOW_JS = """
const b = document.body, limit = b.getBoundingClientRect().right - parseFloat(getComputedStyle(b).paddingRight) + 1;
const inScrollBox = el => { for (let p = el.parentElement; p && p !== b; p = p.parentElement)
  if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return true; return false; };
const out = [...b.querySelectorAll('*')].filter(el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.right > limit && !inScrollBox(el); });
const tables = [...document.querySelectorAll('section.tab:not([hidden]) table')];
return {inner: innerWidth, scroll: document.documentElement.scrollWidth, limit: Math.round(limit),
  out: out.slice(0, 8).map(el => el.tagName + (el.id ? '#' + el.id : '') + ' right ' + Math.round(el.getBoundingClientRect().right)),
  tables: tables.length, wider: tables.filter(t => t.scrollWidth > t.parentElement.clientWidth).map(t => t.id),
  unboxed: tables.filter(t => !t.parentElement.classList.contains('tablebox')).map(t => t.id || t.className),
  unexplained: [...document.querySelectorAll('section.tab:not([hidden]) table.data')].filter(
    t => !(t.parentElement.nextElementSibling || {}).classList?.contains('legend')).map(t => t.id)};
"""


def test_site_tables_fit_1280px_and_explain_their_abbreviations(site, smoke_run, tmp_path):
    """At 1280 px nothing on any tab of the run page runs past the page's column: every table sits in its own scroll box (a wide one,
    such as f04's or the systems compared, scrolls there), and each data table has its legend line under the box. Screenshot of the tables tab."""
    from selenium.webdriver.support.ui import WebDriverWait

    with webdriver_session(tmp_path, window=(1280, 1000)) as d:
        d.get(run_page(site, smoke_run).resolve().as_uri())
        seen = {}
        for tab in ("tables", "judge", "overview", "training", "provenance", "conversations"):
            d.execute_script(f"location.hash = '#{tab}'")
            WebDriverWait(d, 10).until(lambda d: d.execute_script(f"return !document.getElementById('{tab}').hidden"))
            r = seen[tab] = d.execute_script(OVERFLOW_JS)
            assert 1200 <= r["inner"] <= 1280 and r["scroll"] <= r["inner"], (tab, r)
            assert not r["out"] and not r["unboxed"] and not r["unexplained"], (tab, r)
            if tab == "tables":
                d.save_screenshot(str(ARTIFACTS / "site_tables_1280.png"))
        assert seen["tables"]["tables"] >= 4 and seen["judge"]["tables"] >= 3, seen
        (ARTIFACTS / "site_tables_1280.json").write_text(json.dumps(seen, indent=1))  # which tables scroll in their box


def test_site_filters_compare_and_sort_in_a_real_browser(site, smoke_run, tmp_path):
    "Selenium: the system filter, the side-by-side selects and a sortable header act on the page, with nothing on the console."
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    recs = eval_records(smoke_run)
    with webdriver_session(tmp_path) as d:
        d.get(run_page(site, smoke_run).resolve().as_uri() + "#conversations")
        Select(d.find_element(By.ID, "f-system")).select_by_visible_text("zero-shot")
        shown = [a for a in d.find_elements(By.CSS_SELECTOR, "#conv-list article.conv") if a.is_displayed()]
        assert len(shown) == len(recs["zero-shot"]) and {a.get_attribute("data-system") for a in shown} == {"zero-shot"}
        ctx = recs["sft"][0].get("conv_id", recs["sft"][0].get("id"))
        Select(d.find_element(By.ID, "c-ctx")).select_by_visible_text(str(ctx))
        Select(d.find_element(By.ID, "c-a")).select_by_visible_text("mascot")
        Select(d.find_element(By.ID, "c-b")).select_by_visible_text("sft")
        left = d.find_element(By.CSS_SELECTOR, "#c-left article.conv")
        right = d.find_element(By.CSS_SELECTOR, "#c-right article.conv")
        assert (left.get_attribute("data-system"), right.get_attribute("data-system")) == ("mascot", "sft")
        assert left.get_attribute("data-ctx") == right.get_attribute("data-ctx") == str(ctx)
        d.find_element(By.LINK_TEXT, "Tables and figures").click()
        table = d.find_element(By.ID, "tbl-f01_persona_table_ed")
        col = (
            len(table.find_elements(By.CSS_SELECTOR, "thead th")) - 1
        )  # a numeric column (criteria are the last columns)
        table.find_elements(By.CSS_SELECTOR, "thead th")[col].click()
        vals = [
            c.get_attribute("data-v") for c in table.find_elements(By.CSS_SELECTOR, f"tbody tr td:nth-child({col + 1})")
        ]
        nums = [float(v) for v in vals if v]
        assert nums == sorted(nums) and len(nums) >= 2, vals
        d.save_screenshot(str(ARTIFACTS / "site_selenium_tables.png"))
        assert console_errors(d) == []
        assert d.find_element(By.TAG_NAME, "body").get_attribute("data-js-errors") == "0"


def test_site_marks_fallbacks_and_the_small_judge(tmp_path):
    "Without a browser: a fallback turn is marked in its transcript, the overview gives parse and fallback rates per system, and the 135M judge is named on the index, Training and Tables tabs."
    from mascot.testing import demo_run
    from mascot.site.build import build_site
    from mascot.site.sections import run_info, load_conversations

    run = demo_run(tmp_path / "runs" / "demo-run")
    path, recs = load_conversations(run_info(run))["mascot"]
    recs[0]["turns"][1].update(directive_parsed=False, directive_source="fallback")
    for t in recs[0]["turns"][2:] + [t for r in recs[1:] for t in r["turns"]]:
        if t.get("turn_type") != "user":
            t.update(directive_parsed=True, directive_source="director")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    idx = build_site(runs_root=tmp_path / "runs", output_dir=tmp_path / "_site", nbs=tmp_path / "no-nbs")
    page = (tmp_path / "_site/runs/demo-run/index.html").read_text()
    overview = page[page.index("id='overview'") : page.index("id='conversations'")]
    n = sum(t.get("turn_type") != "user" for r in recs for t in r["turns"])
    assert (
        "id='directive-rates'" in overview
        and f"<td>mascot</td><td class='num'>{n}</td><td class='num'>{n - 1} (" in overview
    )
    rates = overview[overview.index("id='directive-rates'") :]
    assert (
        "<td class='num bad'>1 (" in rates.split("<td>mascot</td>", 1)[1].split("</tr>", 1)[0]
    )  # one fallback, marked
    conv = page[page.index("id='conversations'") :]
    assert "class='turn agent fallback'" in conv and "drawn at random" in conv
    for tab, nxt in (("training", "judge"), ("tables", "provenance")):
        section = page[page.index(f"id='{tab}'") : page.index(f"id='{nxt}'")]
        assert "Plumbing check only" in section and "smollm2-135m-instruct" in section, tab
    assert "135M judge: plumbing check" in idx.read_text()  # the index's headline table
