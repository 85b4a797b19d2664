"""The layout rules of DESIGN.md, checked on the source: no import cycles (function-level imports
included), Textual only in specmon/tui/, torch, exllamav2 and llama_cpp only in specmon/backends/."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "specmon"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """module -> every name it imports, anywhere in the file."""
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[_module(path)] = names
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    edges = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                return trail[trail.index(n) :] + [n] if n in trail else [m, n]
            if n not in state and (found := visit(n, trail + [n])):
                return found
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m, [m])):
            return found
    return None


def test_the_tree_of_imports_has_no_cycle():
    graph = _imports()
    assert "specmon.engine.driver" in graph and "specmon.tui.factory" in graph  # the walk saw the package
    assert _cycle(graph) is None


def test_a_planted_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_heavy_imports_stay_in_their_packages():
    for module, names in _imports().items():
        roots = {n.split(".")[0] for n in names}
        if "textual" in roots:
            assert module.startswith("specmon.tui"), module
        if roots & {"torch", "exllamav2", "llama_cpp"}:
            assert module.startswith("specmon.backends"), module
