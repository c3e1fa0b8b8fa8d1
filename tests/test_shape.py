"The shape of the package: its import graph (every import, module level or inside a function) has no cycle, and no stage module imports another."

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "mascot"
# The layers, lowest first: a module imports only from lower layers or from its own subpackage; subpackages of one layer are
# siblings and never import each other (as import-linter's "layers" contract would check).
LAYERS = {
    "core": 0,
    "llm": 1,
    "domain": 2,
    "judging": 3,
    "training": 3,
    "stage1": 4,
    "stage2": 4,
    "evaluation": 4,
    "stages": 5,
    "pipeline": 6,
    "site": 6,
    "studies": 6,
    "cli": 7,
    "testing": 7,
}
STAGES = {
    "stage1.candidates",
    "stage1.speaker_reward_model",
    "stage1.speaker_grpo",
    "stage1.sft",
    "stage2.group_data",
    "stage2.group_reward_model",
    "stage2.director_grpo",
    "stage2.director_dpo",
    "stage2.director_sft",
    "evaluation.conversations",
    "evaluation.judge_all",
    "evaluation.auto_metrics",
}
MAX_MODULE_LINES = 800


def module_name(path: Path, pkg: Path = PKG) -> str:
    "`core.records` for mascot/core/records.py; `testing` for mascot/testing.py."
    return ".".join(path.relative_to(pkg).with_suffix("").parts)


def imported_modules(path: Path, pkg: Path = PKG) -> set[str]:
    "The mascot modules a file imports (relative, `from mascot.x.y import`, `import mascot.x.y`), wherever the import statement is."
    here = module_name(path, pkg).split(".")[:-1] if path.is_relative_to(pkg) else []
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                out.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module and node.module.startswith("mascot."):
                out.add(node.module.removeprefix("mascot."))
        elif isinstance(node, ast.Import):
            out |= {a.name.removeprefix("mascot.") for a in node.names if a.name.startswith("mascot.")}
    return out


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    files = [p for p in sorted(pkg.rglob("*.py")) if p.name not in ("_modidx.py", "__init__.py")]
    names = {module_name(p, pkg) for p in files}
    return {module_name(p, pkg): (imported_modules(p, pkg) & names) - {module_name(p, pkg)} for p in files}


def layer_problems(graph: dict[str, set[str]]) -> list[str]:
    "Edges that go up a layer or across to a sibling subpackage of the same layer."
    out = []
    for m, deps in graph.items():
        top = m.split(".")[0]
        for n in deps:
            other = n.split(".")[0]
            if other == top:
                continue
            if LAYERS[other] >= LAYERS[top]:
                out.append(f"{m} -> {n}")
    return sorted(out)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    "One import cycle as a path (first module repeated at the end), or None."
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return stack[stack.index(n) :] + [n]
            if n not in state and (c := visit(n)):
                return c
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_graph_checks_catch_what_they_look_for():
    # the checks themselves, on a made-up graph: a cycle, an upward edge and a sibling edge are all found
    g = {
        "stage1.candidates": {"core.store", "stage2.group_data"},
        "stage2.group_data": {"stage1.candidates"},
        "core.store": set(),
    }
    assert find_cycle(g) == ["stage1.candidates", "stage2.group_data", "stage1.candidates"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer_problems(
        {"core.store": {"llm.types"}, "judging.rubrics": {"training.pairs"}, "cli": {"core.config"}}
    ) == [
        "core.store -> llm.types",
        "judging.rubrics -> training.pairs",
    ]
    assert "core.config" in imported_modules(PKG / "cli.py")  # imports inside functions count


def test_every_subpackage_has_a_layer():
    assert {m.split(".")[0] for m in import_graph()} <= set(LAYERS), set(import_graph()) - set(LAYERS)


def test_stage_modules_exist():
    assert STAGES <= set(import_graph()), STAGES - set(import_graph())


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_layers_hold():
    problems = layer_problems(import_graph())
    assert not problems, (
        "imports against the layer order core < llm < domain < judging|training < stage1|stage2|evaluation < stages < pipeline|site|studies < cli|testing: "
        + ", ".join(problems)
    )


def test_no_stage_imports_another_stage():
    edges = sorted(f"{m} -> {n}" for m, deps in import_graph().items() if m in STAGES for n in deps if n in STAGES)
    assert not edges, "stage modules importing stage modules (move what they share to a shared module): " + ", ".join(
        edges
    )


def test_modules_stay_readable():
    long = {
        module_name(p): n
        for p in PKG.rglob("*.py")
        if p.name != "_modidx.py" and (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split the notebook): {long}"


def test_notebook_cells_stay_small():
    "nbdev's shape: no exported cell over 60 lines, and most exported cells followed by an example (scripts/cell_sizes.py --check)."
    import subprocess, sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "cell_sizes.py"
    r = subprocess.run([sys.executable, str(script), "--check", "--top", "5"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_a_long_class_cell_is_too_long_like_any_other(tmp_path):
    "A 70-line cell is over the limit whether it holds a documented class or not, and --check names it."
    import importlib.util, json

    spec = importlib.util.spec_from_file_location("cell_sizes", PKG.parent / "scripts" / "cell_sizes.py")
    cs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cs)
    methods = "".join(f"\n    def m{i}(self):\n        return {i}\n" for i in range(22))
    cells = {
        "documented": '#| export\nclass A:\n    "One idea."\n' + methods,
        "short": "#| export\ndef f():\n    pass\n",
    }
    nb = {"cells": [{"cell_type": "code", "id": k, "source": v} for k, v in cells.items()]}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    assert [c["id"] for _, c in cs.report(tmp_path)["too_long"]] == ["documented"]
    assert cs.main(["--nbs", str(tmp_path), "--check"]) == 1


def test_readme_stage_table_is_the_generated_one():
    import re
    from mascot.stages import stage_table

    readme = (PKG.parent / "README.md").read_text()
    m = re.search(
        r"<!-- stage-table: made by mascot.stages.stage_table\(\) -->\n(.*?)\n<!-- /stage-table -->",
        readme,
        re.S,
    )
    assert m, "README.md: no stage table between the stage-table markers"
    assert m.group(1) == stage_table(), (
        "README.md's stage table differs from mascot.stages.stage_table(): paste the generated one"
    )


def test_code_is_formatted():
    "One formatting everywhere (ruff's formatter, 120 columns, pyproject.toml): `make format` applies it, this keeps it."
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is missing: pip install -e '.[dev]'"
    r = subprocess.run(
        [ruff, "format", "--check", "nbs", "tests", "bench", "scripts"], cwd=PKG.parent, capture_output=True, text=True
    )
    assert r.returncode == 0, f"not formatted (run `make format`):\n{r.stdout[-2000:]}"


def missing_names(path: Path) -> list[str]:
    "Names a script imports from mascot (`from mascot.x import a, b`, anywhere in the file) that the module does not define."
    import importlib, importlib.util

    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mascot"):
            mod = importlib.import_module(node.module)
            out += [
                f"{node.module}.{a.name}"
                for a in node.names
                if a.name != "*"
                and not hasattr(mod, a.name)
                and not (
                    hasattr(mod, "__path__") and importlib.util.find_spec(f"{node.module}.{a.name}")
                )  # a submodule
            ]
    return out


def test_bench_and_scripts_import_what_exists(tmp_path):
    "Benchmarks and scripts run only by hand still name things the package has (a moved function would break them silently)."
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from mascot.llm import embedded_backend\nfrom mascot.llm.embedded_backend import EmbeddedBackend, no_such_name\n"
    )
    assert missing_names(probe) == ["mascot.llm.embedded_backend.no_such_name"]  # the check can fail
    root = PKG.parent
    scripts = sorted(root.glob("bench/**/*.py")) + sorted(root.glob("scripts/*.py"))
    broken = {str(p.relative_to(root)): m for p in scripts if (m := missing_names(p))}
    assert not broken, f"imports of names the package lacks: {broken}"


def test_no_unused_imports():
    "No import that nothing uses (ruff's F401), in the notebooks the package is written in and in tests, bench and scripts."
    import shutil, subprocess, sys

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    r = subprocess.run(
        [ruff, "check", "--select", "F401", "nbs", "tests", "bench", "scripts"],
        cwd=PKG.parent,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, f"unused imports (run `make format`):\n{r.stdout[-2000:]}"
