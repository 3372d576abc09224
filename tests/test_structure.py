"""The package's shape: no import circle, small modules and functions.

Size is a signal, not a knife: a module over MAX_MODULE_LINES (a function over
MAX_FUNCTION_LINES) is a question, answered by naming it in WHOLE with the one concept it holds
whole; nothing passes HARD_MODULE_LINES (HARD_FUNCTION_LINES). So a concept is not cut in two
to fit a number, and a module that grows says why.

The import graph is read from the source with `ast`, every import statement counted wherever it
stands (module level, inside functions, under `if TYPE_CHECKING:`): a module imports another of
the package when it names it, or names a package and takes a submodule from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "model_explorer"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
HARD_MODULE_LINES = 700
HARD_FUNCTION_LINES = 100
# Modules (`package.module`) and functions (`package.module.function`) past the signal, each
# with the one concept it holds whole.
WHOLE: dict[str, str] = {
    "model_explorer.quantization.model": "QuantizedModel, one object: its swap, the discovery "
    "of products outside layers, calibration, the genes' quantizers and the undo",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` (at `path`) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
                found.update(next(([p] for p in prefixes if p in modules), []))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                if submodule in modules:
                    found.add(submodule)
                elif origin in modules:
                    found.add(origin)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_function_local_and_relative_imports(tmp_path: Path) -> None:
    modules = {"p": tmp_path / "__init__.py", "p.x": tmp_path / "x.py", "p.y": tmp_path / "y.py"}
    modules["p.x"].write_text("def f():\n    from p import y\n    from . import y as z\n")
    assert imported_modules("p.x", modules["p.x"], modules) == {"p.y"}


def test_no_import_circle_in_the_package() -> None:
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between the package's rooms (its subpackages and top modules)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(_room(module), set()).update(
            _room(target) for target in targets if _room(target) != _room(module)
        )
    return rooms


def test_no_import_circle_between_packages() -> None:
    """The workload reads every package's settings and the context reads the workload: a
    package whose modules also take the context would close a loop (what is done to a
    workload lives in operations/, above the context)."""
    planted = {"p.spec": set(), "p.run": {"w"}, "w": {"p.spec"}}
    assert circles(
        package_graph(
            {f"model_explorer.{k}": {f"model_explorer.{t}" for t in v} for k, v in planted.items()}
        )
    )
    found = circles(package_graph(import_graph()))
    assert not found, "package circles: " + "; ".join(" -> ".join(c) for c in found)


def _oversized(sizes: dict[str, int], signal: int, hard: int) -> list[str]:
    """What passes the hard cap, or the signal without a concept named in WHOLE."""
    return [
        f"{name} ({lines})"
        for name, lines in sizes.items()
        if lines > hard or (lines > signal and name not in WHOLE)
    ]


def module_sizes() -> dict[str, int]:
    return {name: len(path.read_text().splitlines()) for name, path in package_modules().items()}


def function_sizes() -> dict[str, int]:
    found = {}
    for name, path in package_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_the_size_rule_asks_for_a_concept_and_holds_a_hard_cap() -> None:
    sizes = {"a": 450, "b": 380, "c": 800}
    WHOLE["c"] = WHOLE["a"] = "planted"
    try:
        assert _oversized(sizes, 400, 700) == ["c (800)"]
    finally:
        del WHOLE["a"], WHOLE["c"]
    assert _oversized(sizes, 400, 700) == ["a (450)", "c (800)"]


def test_modules_past_400_lines_hold_one_concept_whole() -> None:
    long = _oversized(module_sizes(), MAX_MODULE_LINES, HARD_MODULE_LINES)
    assert not long, (
        f"modules over {MAX_MODULE_LINES} lines: {long}; split them by concept, or name the "
        f"concept each holds whole in WHOLE (none may pass {HARD_MODULE_LINES})"
    )


def test_functions_past_60_lines_hold_one_concept_whole() -> None:
    long = _oversized(function_sizes(), MAX_FUNCTION_LINES, HARD_FUNCTION_LINES)
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} lines: {long}; split them by concept, or name "
        f"the concept each holds whole in WHOLE (none may pass {HARD_FUNCTION_LINES})"
    )


def test_every_whole_concept_names_something_past_the_signal() -> None:
    """An entry whose module shrank back below the signal goes, so WHOLE stays the list of
    what is large."""
    sizes = {**module_sizes(), **function_sizes()}
    stale = [
        name
        for name in WHOLE
        if sizes.get(name, 0)
        <= (MAX_FUNCTION_LINES if name in function_sizes() else MAX_MODULE_LINES)
    ]
    assert not stale, f"WHOLE names what is no longer past the signal: {stale}"


BOTTOM = {
    "errors",
    "schema",
    "fileio",
    "filekinds",
    "memory",
    "figures",
    "modules",
    "plan",
    "tracing",
    "formats",
    "native",
}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else module


def test_rooms_import_only_downwards() -> None:
    """The bottom imports nothing above it, analysis/ is imported only by the CLI, the CLI by
    nothing but `python -m`, and the Python API (api/) by nothing of the package: the package's
    face loads it by name on first use."""
    wrong = []
    for module, targets in import_graph().items():
        room = _room(module)
        for target in targets:
            above = _room(target)
            if room in BOTTOM and above not in BOTTOM:
                wrong.append(f"{module} -> {target}")
            if above == "analysis" and room not in ("analysis", "cli"):
                wrong.append(f"{module} -> {target}")
            if above == "cli" and room not in ("cli", "__main__"):
                wrong.append(f"{module} -> {target}")
            if above == "api" and room != "api":
                wrong.append(f"{module} -> {target}")
    assert not wrong, wrong


def test_reading_every_shipped_workload_imports_no_torch() -> None:
    """The settings are torch-free: each capability's settings and registry sit in a spec
    module, built-in entries declared with their builders named by import path. Checked in a
    fresh interpreter, which then builds a model to show the declared entries work."""
    import subprocess
    import sys

    root = PACKAGE.parent
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from model_explorer.workload.file import Workload\n"
        "for path in sorted(Path('workloads').glob('*.yaml')):\n"
        "    if 'cifar10' in path.name or 'imagenet' in path.name:\n"
        "        continue  # they name data that is not on this machine\n"
        "    Workload.load(path)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from model_explorer.models.registry import create_model\n"
        "model = create_model(Workload.load('workloads/digits_cnn.yaml').model.type)\n"
        "print(type(model).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Sequential"  # digits_cnn is an nn.Sequential
