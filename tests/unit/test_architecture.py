"""The package's rooms and the arrows between them (docs/architecture.md).

Every import inside ``trident`` goes from a room to one below it (or within the room); the
pure core imports no Ray; no two modules import each other, directly or around a loop.
"""
import ast
import pathlib

import trident

ROOT = pathlib.Path(trident.__file__).parent
# Lowest first: a room may import only the rooms before it (and itself).
LAYERS = ("core", "history", "report", "autoscaler", "jobs", "sim", "demos", "face")
# The demos are written as a user writes them: through the public face, ``import trident``.
ALLOWED_UPWARD = {("demos", "trident")}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """The trident modules ``name`` imports anywhere in its body (lazy imports included);
    ``from pkg import mod`` counts as importing ``pkg.mod``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "trident"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "trident":
                continue
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
            found |= subs or {base}
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return "face" if len(parts) == 1 or parts[1] == "cli" else parts[1]


def test_every_module_lives_in_a_named_room():
    assert {_room(m) for m in MODULES} == set(LAYERS)


def test_imports_only_go_down_the_rooms():
    upward = sorted(f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps
                    if LAYERS.index(_room(b)) > LAYERS.index(_room(a))
                    and (_room(a), b) not in ALLOWED_UPWARD)
    assert upward == []


def test_the_core_never_imports_ray():
    offenders = []
    for name, path in MODULES.items():
        if _room(name) != "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{name}: {m}" for m in mods if m.split(".")[0] == "ray"]
    assert offenders == []


def test_no_import_cycles():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert cycles == []


MODULE_LINES, FUNCTION_LINES = 400, 60
LONG_MODULES = {
    "trident/jobs/scheduler.py": "the JobScheduler: admission, its loop, the pass host (launch, eviction), nodes and outcomes",
    "trident/autoscaler/shim/shim.py": "the execution shim: observe, talk to the controller, actuate, in Ray's thread",
    "trident/sim/engine.py": "the cluster simulator's event loop",
    "trident/core/optimize/safe_bo.py": "memory-safe Bayesian optimisation: model, acquisition and certification",
    "trident/autoscaler/policies/trident/problem.py": "the placement problem of a snapshot: rates, bounds, options",
}
"""Modules over ``MODULE_LINES`` lines, each with what it holds; none may join them."""
LONG_FUNCTIONS = {
    "trident/sim/engine.py:run": "the simulator's event loop",
    "trident/autoscaler/policies/trident/tuner.py:next_batch_size": "the batch-size search's step",
    "trident/autoscaler/policies/trident/problem.py:build": "a snapshot's placement problem",
    "trident/core/plan/milp.py:_model": "the MILP's variables and constraints",
    "trident/autoscaler/policies/trident/tracking.py:observe": "one operator's windows, shifts and regimes",
    "trident/sim/loaders/alibaba.py:load_pai_2020": "the PAI 2020 trace's join of its tables",
    "trident/autoscaler/policies/trident/inner.py:inner_targets": "Ray's rule over every pool, within the room",
    "trident/core/plan/device_choices.py:of": "the device-choice bounds of a problem",
    "trident/demos/cli.py:main": "the demo command",
    "trident/core/optimize/safe_bo.py:suggest": "one certified suggestion",
    "trident/autoscaler/policies/trident/shifts.py:check_stall": "a stall's bound on an operator's rate",
    "trident/core/model/synthetic.py:synthetic_trace": "a seeded trace with known truth",
}
"""Functions over ``FUNCTION_LINES`` lines, each with what it does; none may join them."""


def _lines():
    modules, functions = {}, {}
    for name, path in MODULES.items():
        rel = str(path.relative_to(ROOT.parent))
        modules[rel] = len(path.read_text().splitlines())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{rel}:{node.name}"] = max(functions.get(f"{rel}:{node.name}", 0),
                                                      node.end_lineno - node.lineno + 1)
    return modules, functions


def test_modules_and_functions_stay_small_but_for_the_named_few():
    modules, functions = _lines()
    assert sorted(m for m, n in modules.items() if n > MODULE_LINES) == sorted(LONG_MODULES)
    assert sorted(f for f, n in functions.items() if n > FUNCTION_LINES) == sorted(LONG_FUNCTIONS)
