"""The notebooks of evaluation_scripts/ as pages of the site, outputs and figures included.

`python docs/_hooks/notebooks.py` (in the repository after `make run`, with the `notebooks`
extra: nbconvert) runs each notebook top to bottom as a user does, its kernel started in
evaluation_scripts/, the result files those of `make run`, and writes docs/notebooks/NAME.md
with its figures beside it in NAME_files/. The notebooks themselves stay stored without
outputs. tests/test_documentation.py fails when a page's code differs from its notebook's, so
the site never shows code a notebook no longer has; run this again after changing one.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPOSITORY / "evaluation_scripts"
PAGES = REPOSITORY / "docs" / "notebooks"
# The order they run in: the search notebook writes a result of its own into results/, which
# the other two would otherwise take for the newest exploration.
ORDER = ["visualize_individuals", "dram_accesses", "search_from_python"]
HEADER = (
    "<!-- generated from evaluation_scripts/{name}.ipynb by python docs/_hooks/notebooks.py;"
    " edit the notebook, not this page -->\n\n"
)


def render(name: str) -> None:
    """Run the notebook NAME and write its page with the figures it drew."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import MarkdownExporter

    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    kernel_folder = {"metadata": {"path": str(NOTEBOOKS)}}
    NotebookClient(notebook, timeout=600, resources=kernel_folder).execute()
    for cell in notebook.cells:  # what a cell printed and drew; not its logs and progress bars
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
    body, resources = MarkdownExporter().from_notebook_node(
        notebook, resources={"output_files_dir": f"{name}_files"}
    )
    figures = PAGES / f"{name}_files"
    shutil.rmtree(figures, ignore_errors=True)
    for relative, data in resources.get("outputs", {}).items():
        target = PAGES / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    # the kernel's folder is the user's, not this machine's
    body = body.replace(str(REPOSITORY) + "/", "")
    (PAGES / f"{name}.md").write_text(HEADER.format(name=name) + body.strip() + "\n")


def main(names: list[str]) -> int:
    unknown = set(names) - set(ORDER)
    if unknown:
        print(f"no notebook named {', '.join(sorted(unknown))}; they are {', '.join(ORDER)}")
        return 2
    PAGES.mkdir(exist_ok=True)
    os.environ["TQDM_DISABLE"] = "1"  # the kernels inherit it: no progress bars in the pages
    for name in [n for n in ORDER if n in names] if names else ORDER:
        render(name)
        print(f"wrote docs/notebooks/{name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
