"""The layout rules of docs/development.md, checked on the source (function-level imports included):
packages import only downwards through LAYERS, no import cycles, Textual only in specmon/tui/, torch,
exllamav2, exllamav3 and llama_cpp only in specmon/backends/."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "specmon"

# specmon's packages and top-level modules, low to high: each imports only from layers below its own,
# never from one beside it or above it. A new package is placed here before it can be imported.
LAYERS = (
    ("errors", "data", "text"),
    ("textfile", "console", "hangup"),
    ("events", "telemetry"),
    ("metrics", "memory"),
    ("engine", "tables"),
    ("backends", "policy", "transport"),
    ("sched",),
    ("server", "replay"),
    ("tui",),  # the view: replays and live sessions; the front-ends below open it
    ("watch",),
    ("proxy",),
    ("cli",),  # parses arguments and calls: nothing imports it
)


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


def _package(module: str) -> str:
    """specmon.metrics.served -> metrics; the bare `specmon` (its __version__) -> ""."""
    return module.split(".")[1] if "." in module else ""


def _upward(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """Every import from a package to one in its own layer or above, as `importer -> imported`
    (one LAYERS does not place is left to test_every_package_has_a_layer, which names it)."""
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    found = []
    for module, names in sorted(graph.items()):
        here = _package(module)
        for name in sorted(n for n in names if n.startswith("specmon.") and n in graph):
            there = _package(name)
            if there != here and {here, there} <= rank.keys() and rank[there] >= rank[here]:
                found.append(f"{module} -> {name}")
    return found


def test_every_package_has_a_layer():
    placed = {name for layer in LAYERS for name in layer}
    packages = {_package(m) for m in _imports()} - {""}
    assert packages - placed == set(), (
        "new in specmon/: put each in LAYERS, above what it imports, below what imports it"
    )
    assert placed - packages == set(), "LAYERS names what specmon no longer has"


def test_packages_import_only_from_lower_layers():
    assert _upward(_imports()) == []


def test_an_upward_or_sideways_import_is_found():
    graph = {
        "specmon.events.schema": {"specmon.metrics.stats"},  # up
        "specmon.metrics.stats": {"specmon.telemetry.host"},  # down: fine
        "specmon.telemetry.host": {"specmon.events.log"},  # beside, in one layer
        "specmon.events.log": set(),
    }
    assert _upward(graph) == [
        "specmon.events.schema -> specmon.metrics.stats",
        "specmon.telemetry.host -> specmon.events.log",
    ]


def test_heavy_imports_stay_in_their_packages():
    for module, names in _imports().items():
        roots = {n.split(".")[0] for n in names}
        if "textual" in roots:
            assert module.startswith("specmon.tui"), module
        if roots & {"torch", "exllamav2", "exllamav3", "llama_cpp"}:
            assert module.startswith("specmon.backends"), module
