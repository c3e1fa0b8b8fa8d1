"The shape of the package: its import graph (every import, module level or inside a function) has no cycle, and no stage module imports another."

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "mascot"
STAGES = {
    "candidates",
    "reward_model",
    "speaker_grpo",
    "sft",
    "group_data",
    "group_reward_model",
    "director_grpo",
    "director_dpo",
    "evaluate",
    "llm_judge",
    "auto_metrics",
}


def imported_modules(path: Path) -> set[str]:
    "The mascot modules a file imports (`from .x import`, `from mascot.x import`, `import mascot.x`), wherever the import statement is."
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                out.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.startswith("mascot."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("mascot.")}
    return out


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    names = {p.stem for p in pkg.glob("*.py")}
    return {p.stem: imported_modules(p) & names - {p.stem} for p in sorted(pkg.glob("*.py")) if p.stem != "_modidx"}


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
    # the checks themselves, on a made-up graph: a cycle and a stage->stage edge are both found
    g = {"candidates": {"core", "group_data"}, "group_data": {"candidates"}, "core": set()}
    assert find_cycle(g) == ["candidates", "group_data", "candidates"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert imported_modules(PKG / "cli.py") >= {"core"}  # imports inside functions count


def test_stage_modules_exist():
    assert STAGES <= set(import_graph()), STAGES - set(import_graph())


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_no_stage_imports_another_stage():
    edges = sorted(f"{m} -> {n}" for m, deps in import_graph().items() if m in STAGES for n in deps if n in STAGES)
    assert not edges, "stage modules importing stage modules (move what they share to a shared module): " + ", ".join(
        edges
    )


def test_readme_stage_table_is_the_generated_one():
    import re
    from mascot.pipeline import stage_table

    readme = (PKG.parent / "README.md").read_text()
    m = re.search(
        r"<!-- stage-table: made by mascot.pipeline.stage_table\(\) -->\n(.*?)\n<!-- /stage-table -->", readme, re.S
    )
    assert m, "README.md: no stage table between the stage-table markers"
    assert m.group(1) == stage_table(), (
        "README.md's stage table differs from mascot.pipeline.stage_table(): paste the generated one"
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
    "Benchmarks and scripts run only by hand still name things the package has (a bench once imported a moved function)."
    probe = tmp_path / "probe.py"
    probe.write_text("from mascot import llm\nfrom mascot.llm import EmbeddedBackend, no_such_name\n")
    assert missing_names(probe) == ["mascot.llm.no_such_name"]  # the check can fail
    root = PKG.parent
    scripts = sorted(root.glob("bench/**/*.py")) + sorted(root.glob("scripts/*.py"))
    broken = {str(p.relative_to(root)): m for p in scripts if (m := missing_names(p))}
    assert not broken, f"imports of names the package lacks: {broken}"
