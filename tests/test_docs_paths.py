"""Every doc page and module a doc names exists: `docs/name.md` and `specmon/....py` as written in
README.md and docs/*.md (a placeholder in capitals, `specmon/backends/NAME.py`, is not a path), and
each Markdown link to a .md page, resolved from the linking page."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"(?<![\w./-])((?:docs/[a-z0-9_./-]+\.md)|(?:specmon/[a-z0-9_/]+\.py))")
LINKED = re.compile(r"\]\(([^)#\s:]+\.md)(?:#[^)]*)?\)")  # [text](page.md#part); no scheme: not a URL


def missing(doc: Path, repo: Path = REPO) -> list[str]:
    """`doc:line: path` for each path the doc names that is not in the checkout."""
    found = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        paths = [repo / p for p in NAMED.findall(line)] + [doc.parent / p for p in LINKED.findall(line)]
        found += [f"{doc.relative_to(repo)}:{number}: {p.resolve().relative_to(repo)}" for p in paths if not p.exists()]
    return found


def test_every_path_the_docs_name_exists():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert len(docs) > 5  # the walk saw the docs
    assert [line for doc in docs for line in missing(doc)] == []


def test_a_missing_path_is_said_with_its_doc_and_line(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "specmon").mkdir()
    (tmp_path / "specmon" / "here.py").write_text("")
    doc = tmp_path / "docs" / "page.md"
    doc.write_text(
        "see specmon/here.py and specmon/NAME.py\nbut specmon/gone.py, docs/none.md,\n"
        "[a link](other.md#part), [web](https://example.org/a.md)\n"
    )
    assert missing(doc, tmp_path) == [
        "docs/page.md:2: specmon/gone.py",
        "docs/page.md:2: docs/none.md",
        "docs/page.md:3: docs/other.md",
    ]


def _development_guide() -> str:
    return " ".join((REPO / "docs" / "development.md").read_text().split())  # its prose, unwrapped


def test_the_development_guide_names_every_slow_test_file_and_no_other():
    said = re.search(r"\*\*Slow tests\*\*(.*?)\n?- \*\*Skipped", _development_guide())
    named = set(re.findall(r"`(test_\w+\.py)`", said.group(1)))
    marked = re.compile(
        r"^\s*(@|pytestmark = )?pytest\.mark\.slow\b", re.MULTILINE
    )  # a decorator, a module's, a param's
    slow = {p.name for p in (REPO / "tests").glob("test_*.py") if marked.search(p.read_text())}
    assert len(slow) > 10 and named == slow, (sorted(slow - named), sorted(named - slow))


def test_the_development_guide_gives_the_layers_test_layout_checks():
    from test_layout import LAYERS

    prose = re.search(r"LAYERS, low to high: (.*?)\. So nothing", _development_guide()).group(1)
    said = tuple(tuple(re.split(r", | and ", layer.strip())) for layer in prose.split(";"))
    assert said == LAYERS
