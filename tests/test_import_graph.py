"""The import graph of `lens` and `lens_kernels`, read statically with `ast`: no circle, no upward import, and
no import inside a function unless a marker comment names an allowed reason.

Every `import` / `from ... import` of a lens module counts, at the top of a file and inside functions alike: an
import moved into a function to dodge a circle is still a circle. LAYERS is the house plan of
docs/architecture.md ("Module layers"): a module may import from its own layer or a lower one. The order follows
the data flow (data -> rollout -> reward -> purify -> advantages -> loss -> step -> checkpoint/log): each stage
imports the stages it consumes, never one that consumes it.

An import inside a function is allowed only with `# lazy: <reason>` on its line or the line above, the reason
one of LAZY_REASONS. A function-level import that only dodges a circle has no such reason: restructure instead.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Where the packages live (name -> folder): lens/ and the Triton kernels' kernels/lens_kernels/.
PACKAGES = {"lens": REPO / "lens", "lens_kernels": REPO / "kernels" / "lens_kernels"}
# Folders whose scripts import lens: not part of the graph (nothing imports them), but their function-level
# imports of lens need a reason all the same.
SCRIPTS = (REPO / "bench",)

# Bottom first. A name ending in `.*` covers a package's submodules; an exact name wins over a pattern.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Records, names and pure helpers that everything may read: no lens import but each other.
    (
        "foundation",
        (
            "lens",
            "lens.errors",
            "lens.console",
            "lens.problem",
            "lens.variants",
            "lens.lifeline",
            "lens.padding",
            "lens.packing",
            "lens.tasks",  # the task registry (names, lookup); the task modules are `data`
            "lens.tasks.base",
        ),
    ),
    # The run's settings and its locks/stop requests, read by every stage below the tools.
    ("config", ("lens.config", "lens.runlock", "lens.stop")),
    # Where problems come from and how an answer is judged: the loader checks golds with the verifiers.
    ("data", ("lens.answers", "lens.verify_pool", "lens.reward", "lens.data", "lens.tasks.*")),
    # Tensors: models, sampling, scoring, purification, advantages and losses, kernels and collectives.
    (
        "compute",
        (
            "lens.attention",
            "lens.balance",
            "lens.model",
            "lens.rollout",
            "lens.rollout.*",
            "lens.scoring",
            "lens.purify",
            "lens.trial",
            "lens.groups",
            "lens.algos",
            "lens.ops",
            "lens.dist",
            "lens.reward_fns",  # the user's reward functions: the verifiers' pool, metrics declared with lens.dist
            "lens.memplan",
            "lens_kernels",
            "lens_kernels.*",
        ),
    ),
    # What a run keeps and checks: checkpoints, metrics, the run's state, checks before a run, evaluation.
    (
        "record",
        ("lens.checkpoint", "lens.metrics", "lens.runstate", "lens.summary", "lens.preflight", "lens.eval"),
    ),
    # One training step of each method (rollout -> reward -> purify -> advantages -> loss).
    ("methods", ("lens.methods", "lens.step_logprobs")),
    # The training loop.
    ("train", ("lens.train",)),
    # Commands around runs: nothing below imports them.
    (
        "tools",
        (
            "lens.launch",
            "lens.bench_step",
            "lens.report",
            "lens.audit",
            "lens.gates",
            "lens.trial_gate",
            "lens.probes",
            "lens.robustness",
            "lens.datahub",
            "lens.data.__main__",
            "lens.tasks.warmstart",
        ),
    ),
)

# The reasons an import may sit inside a function (keep this list tiny).
LAZY_REASONS = {
    "optional": "an optional dependency that may not be installed (vLLM)",
    "startup": "seconds of import (transformers, DeepSpeed, Triton) that a command's quick paths never need",
}
_MARKER = re.compile(r"#\s*lazy:\s*(\w+)")


@dataclass(frozen=True)
class Import:
    """One import of a lens module: who imports what, where, and whether inside a function (with its marker)."""

    source: str
    target: str
    path: Path
    line: int
    in_function: bool
    reason: str | None


def modules(packages: dict[str, Path]) -> dict[str, Path]:
    """Module name -> file of every .py file of the packages (a package is its __init__.py)."""
    out = {}
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [name, *path.relative_to(folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The known modules an import statement loads: `from lens import data` is lens.data, `from lens.data
    import load` is lens.data (a name in it)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's package, one level up per extra dot
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[: len(package) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for name in names:
        while name and name not in known:  # `import lens.data.x` where x is a name: its module
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return list(dict.fromkeys(out))


def imports(files: dict[str, Path]) -> list[Import]:
    """Every import of one of `files`' modules by another, at any depth of the syntax tree."""
    known = set(files)
    out = []
    for module, path in files.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text, filename=str(path))
        # Parents first, so every node knows whether a function encloses it.
        in_function: dict[ast.AST, bool] = {tree: False}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                in_function[child] = in_function[parent] or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            marks = [_MARKER.search(lines[i]) for i in (node.lineno - 1, node.lineno - 2) if i >= 0]
            reason = next((m[1] for m in marks if m), None)
            for target in _targets(node, module, path.name == "__init__.py", known):
                if target != module:
                    out.append(Import(module, target, path, node.lineno, in_function[node], reason))
    return out


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph as [a, b, ..., a], or None (depth-first search, nodes in sorted order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index of the module's layer (0 = bottom): its exact name, else the longest `pkg.*` pattern above it."""
    best: tuple[int, int] | None = None  # (length of the matched prefix, layer)
    for index, (_, names) in enumerate(layers):
        for name in names:
            if name == module:
                return index
            if name.endswith(".*") and module.startswith(name[:-1]) and (best is None or len(name) > best[0]):
                best = (len(name), index)
    return best[1] if best else None


def upward(found: list[Import], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """The imports from a lower layer to a higher one, as `file:line: a (layer) -> b (layer)`."""
    out = []
    for imp in found:
        lo, hi = layer_of(imp.source, layers), layer_of(imp.target, layers)
        if lo is not None and hi is not None and hi > lo:
            where = f"{imp.path.relative_to(REPO) if imp.path.is_relative_to(REPO) else imp.path}:{imp.line}"
            out.append(f"{where}: {imp.source} ({layers[lo][0]}) -> {imp.target} ({layers[hi][0]})")
    return out


def unexplained_lazy(found: list[Import]) -> list[str]:
    """Function-level imports without an allowed `# lazy: <reason>` marker, as `file:line: a -> b`."""
    return [
        f"{i.path}:{i.line}: {i.source} -> {i.target} (marker: {i.reason})"
        for i in found
        if i.in_function and i.reason not in LAZY_REASONS
    ]


def _graph(found: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for imp in found:
        edges.setdefault(imp.source, set()).add(imp.target)
    return edges


@pytest.fixture(scope="module")
def lens_imports() -> list[Import]:
    return imports(modules(PACKAGES))


def test_no_import_circle(lens_imports: list[Import]) -> None:
    cycle = find_cycle(_graph(lens_imports))
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_every_module_has_a_layer() -> None:
    assert [m for m in modules(PACKAGES) if layer_of(m) is None] == []


def test_no_upward_import(lens_imports: list[Import]) -> None:
    assert upward(lens_imports) == []


def test_function_level_imports_say_why(lens_imports: list[Import]) -> None:
    scripts = {f"{p.parent.name}.{p.stem}": p for folder in SCRIPTS for p in sorted(folder.rglob("*.py"))}
    lens_files = modules(PACKAGES)
    # The scripts' imports of lens: parsed with lens's modules known, kept where a script imports lens.
    script_imports = [i for i in imports({**lens_files, **scripts}) if i.source in scripts]
    assert unexplained_lazy(lens_imports + script_imports) == []


# ----------------------------------------------------------------------------------------------------
# The checker can fail: a synthetic package with a circle, an upward import and an unexplained lazy import
# ----------------------------------------------------------------------------------------------------


def test_checker_reports_a_circle_an_upward_edge_and_an_unexplained_lazy_import(tmp_path: Path) -> None:
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from toy import high  # dodges the circle\n")
    (pkg / "high.py").write_text("from toy import low\n\n\ndef g():\n    from toy import low  # lazy: optional\n")
    (pkg / "lone.py").write_text("from . import low\n")
    found = imports(modules({"toy": pkg}))
    assert find_cycle(_graph(found)) in (["toy.high", "toy.low", "toy.high"], ["toy.low", "toy.high", "toy.low"])
    layers = (("bottom", ("toy", "toy.low", "toy.lone")), ("top", ("toy.high",)))
    assert [u.split(": ", 1)[1] for u in upward(found, layers)] == ["toy.low (bottom) -> toy.high (top)"]
    lazy = unexplained_lazy(found)
    assert len(lazy) == 1 and "toy.low -> toy.high" in lazy[0]
    assert ("toy.lone", "toy.low") in {(i.source, i.target) for i in found}  # a relative import counts too
    # Without the function-level import there is no circle: the top-level one alone is a plain edge.
    (pkg / "low.py").write_text("X = 1\n")
    assert find_cycle(_graph(imports(modules({"toy": pkg})))) is None


def test_layer_patterns() -> None:
    assert (
        layer_of("lens.tasks") == 0 and layer_of("lens.tasks.vartrack") == 2 and layer_of("lens.tasks.warmstart") == 7
    )
    assert layer_of("lens.nope") is None
