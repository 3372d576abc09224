"""The public constructors and functions a research script calls document every argument, in an
`Args:` section as torchinfo's `summary` does: each parameter named at the start of a line
(`name:` or `name, other:` for arguments described together)."""

from __future__ import annotations

import inspect
import pkgutil
import re

import pytest

# module:attribute (a class: its constructor) of the API the documentation and the notebooks use.
PUBLIC = [
    "model_explorer.api.search:search",
    "model_explorer.api.quantize:quantize",
    "model_explorer.api.quantize:calibrate",
    "model_explorer.workload.file:Workload.load",
    "model_explorer.workload.file:Workload.from_dict",
    "model_explorer.workload.context:WorkloadContext",
    "model_explorer.models:build_model",
    "model_explorer.models:create_model",
    "model_explorer.datasets:build_dataset",
    "model_explorer.datasets:build_loader",
    "model_explorer.datasets:TensorCache",
    "model_explorer.metrics.functions:evaluate",
    "model_explorer.training.loop:train",
    "model_explorer.quantization:QuantizedModel",
    "model_explorer.quantization:QuantizedModel.calibrate",
    "model_explorer.quantization:make_calibrator",
    "model_explorer.quantization:TensorQuantizer",
    "model_explorer.quantization:WeightQuantizer",
    "model_explorer.sparsity:SparseModel",
    "model_explorer.cost:analyze_cost",
    "model_explorer.cost:measure_layers",
    "model_explorer.cost:BitCostModel",
    "model_explorer.cost.graph:layer_producers",
    "model_explorer.problems.quantization:LayerwiseQuantizationProblem",
    "model_explorer.problems.sparsity:SparsityThresholdProblem",
    "model_explorer.problems.sparsity:QuantizationSparsityProblem",
    "model_explorer.operations.rebuild:build_problem",
    "model_explorer.problems:register_problem",
    "model_explorer.problems.objectives:register_objective",
    "model_explorer.problems.objectives:objective",
    "model_explorer.exploration.explorer:Explorer",
    "model_explorer.operations.explore:explore",
    "model_explorer.results:ExplorationResult",
    "model_explorer.analysis.hooks:HookRunner",
    "model_explorer.analysis.hooks:DalgonaRunner",
    "model_explorer.analysis.compare:compare",
    "model_explorer.analysis.diagnose:DiagnosisContext",
    "model_explorer.analysis.diagnose:run_inspectors",
    "model_explorer.tracing:Tracer",
    "model_explorer.tracing:trace",
]


def _documented(doc: str) -> set[str]:
    """The names the `Args:` section describes."""
    _, _, section = doc.partition("Args:")
    names: set[str] = set()
    for line in section.splitlines():
        match = re.match(r"\s{4,8}([\w*][\w, *]*):", line)
        if match:
            names.update(n.strip().lstrip("*") for n in match.group(1).split(","))
    return names


@pytest.mark.parametrize("path", PUBLIC)
def test_every_argument_is_documented(path: str) -> None:
    target = pkgutil.resolve_name(path)
    function = target.__init__ if inspect.isclass(target) else target
    doc = inspect.getdoc(target) or ""
    if inspect.isclass(target) and "Args:" not in doc:
        doc = inspect.getdoc(function) or ""
    parameters = [
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if name not in ("self", "cls")
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    missing = [name for name in parameters if name not in _documented(doc)]
    assert "Args:" in doc and not missing, f"{path}: undocumented {missing}"


def test_the_commands_page_holds_every_option_the_parser_has() -> None:
    """docs/commands.md's generated section is what docs/_hooks/commands.py makes from the
    parser now: an option added to a command and not to the page fails here."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "docs" / "_hooks" / "commands.py"
    spec = importlib.util.spec_from_file_location("commands_page", script)
    assert spec is not None and spec.loader is not None
    page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(page)
    wanted = page.page_with(page.generated())
    assert page.PAGE.read_text() == wanted, "run python docs/_hooks/commands.py"
    for option in ("--set KEY=VALUE", "--report", "--check RUNTIME", "--int8-weights"):
        assert option in wanted


def test_every_notebook_is_a_page_with_its_code_and_figures() -> None:
    """docs/notebooks/NAME.md (written by docs/_hooks/notebooks.py from a run of the notebook)
    shows the notebook's code cells as they are now, in order, each figure it names is beside
    it, and the site's navigation lists it: a notebook changed without its page fails here."""
    import re
    from pathlib import Path

    import nbformat

    repository = Path(__file__).resolve().parents[1]
    pages = repository / "docs" / "notebooks"
    fence = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
    navigation = (repository / "mkdocs.yml").read_text()
    notebooks = sorted((repository / "evaluation_scripts").glob("*.ipynb"))
    assert notebooks
    for notebook_path in notebooks:
        name = notebook_path.stem
        page = pages / f"{name}.md"
        assert page.is_file(), f"no page for {notebook_path.name}: python docs/_hooks/notebooks.py"
        text = page.read_text()
        cells = [
            cell.source.strip()
            for cell in nbformat.read(notebook_path, as_version=4).cells
            if cell.cell_type == "code"
        ]
        shown = [code.strip() for code in fence.findall(text)]
        assert shown == cells, f"{page.name} is stale: python docs/_hooks/notebooks.py {name}"
        figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        assert figures and all((pages / figure).is_file() for figure in figures), page.name
        assert f"notebooks/{name}.md" in navigation, f"{name} is not in mkdocs.yml's nav"
