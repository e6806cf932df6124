"""The pages that show dupq as a library (docs/python.md, docs/architecture.md): their examples run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


PYTHON_PAGES = ["docs/python.md", "docs/architecture.md"]
NOT_RUN = "# not run"  # the first line of a block that is compiled but not run (it needs the teacher, say)


def python_blocks(page: Path) -> list[str]:
    """The code of the ```python blocks of a page, in order."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.M | re.S)


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_the_python_examples_of_a_page_run(page, tmp_path):
    """A page's ```python blocks run in order, as one script in a fresh interpreter; a block that begins
    ``# not run`` must still compile."""
    blocks = python_blocks(REPO / page)
    assert len(blocks) >= 3, f"{page} shows no python"
    for block in blocks:
        compile(block, page, "exec")
    script = "\n".join(block for block in blocks if not block.startswith(NOT_RUN))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"a python block of {page} failed:\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr


def test_the_python_pages_show_the_face_and_the_readme_links_them():
    readme = (REPO / "README.md").read_text()
    assert "from dupq import Collection, DupqError, Model, adapt, dedup" in (REPO / "docs" / "python.md").read_text()
    assert all(f"]({page})" in readme for page in PYTHON_PAGES)
