"""The trident policy's state is one declared record: the step's functions read and write only
the fields and methods :class:`PolicyState` declares, and a new policy starts from it."""
import ast
import dataclasses
from pathlib import Path

from trident.autoscaler.policies.trident import TridentPolicy
from trident.autoscaler.policies.trident.state import PolicyState
from trident.core.policy import PolicyContext

PACKAGE = Path(__file__).resolve().parents[2] / "trident" / "autoscaler" / "policies" / "trident"


def _state_uses() -> dict[str, set[str]]:
    """Attributes of the state that each module's functions of a ``PolicyState`` use."""
    uses: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(fn, ast.FunctionDef) and fn.args.args and fn.args.args[0].annotation is not None
                    and ast.unparse(fn.args.args[0].annotation) == "PolicyState"):
                continue
            name = fn.args.args[0].arg
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name:
                    uses.setdefault(path.name, set()).add(node.attr)
    return uses


def test_the_steps_use_only_what_the_state_declares():
    declared = {f.name for f in dataclasses.fields(PolicyState)} | {n for n in vars(PolicyState)
                                                                    if not n.startswith("__")}
    uses = _state_uses()
    assert {"policy.py", "planner.py", "rollouts.py", "tuning.py"} <= set(uses), sorted(uses)
    undeclared = {m: sorted(a - declared) for m, a in uses.items() if a - declared}
    assert undeclared == {}


def test_no_class_of_the_policy_is_built_of_mixins():
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                assert all(b in ("Protocol", "NamedTuple") for b in bases), (path.name, node.name, bases)


def test_a_new_policy_starts_from_a_fresh_state_with_its_context_and_settings():
    a, b = TridentPolicy(context=PolicyContext(seed=3)), TridentPolicy(context=PolicyContext(seed=3))
    assert a.state is not b.state and a.state.bounds is not b.state.bounds
    assert a.state.context.seed == 3 and a.settings is a.state.settings
    assert (a.state.plan_seq, a.state.last_look_s, a.state.replan_now) == (0, None, False)
    a.state.look_again()
    assert (a.state.replan_now, a.state.last_look_s) == (True, None)
