"""Meta-tests that keep hooks, tests, docs and packaging in step (datasette's test_docs.py idea).

* every hook in hookspecs has a test that implements or calls it, and a section in CONTRIBUTING.md
  with its exact signature;
* every hookspec says how it is called (firstresult hooks: "Stops at the first non-None result");
* the installed entry-point metadata lists exactly ``BUILTIN_PLUGINS`` (catches a stale editable
  install), and every built-in imports;
* the default plugins are ``trylast=True`` hookimpls, so any other plugin overrides them.
"""

from __future__ import annotations

import ast
import inspect
import re
from importlib import metadata
from pathlib import Path

import pytest

from progressive_compactor import hookspecs, load_config
from progressive_compactor.plugin_manager import BUILTIN_PLUGINS, GROUP, installed_plugins, load_plugin_object

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
SPEC_ATTR = f"{hookspecs.PROJECT}_spec"
IMPL_ATTR = f"{hookspecs.PROJECT}_impl"

HOOKS = sorted(name for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, SPEC_ATTR))


def signature(hook: str) -> str:
    """``def hook(args) -> result:`` exactly as hookspecs.py declares it, on one line."""
    tree = ast.parse(Path(hookspecs.__file__).read_text("utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == hook)
    return next(line for line in ast.unparse(node).splitlines() if line.startswith("def "))


def squeeze(text: str) -> str:
    return re.sub(r"\s+|,(?=\s*\))", "", text)


def test_there_are_hooks():
    assert {"summarize", "offload", "fallback_compact", "persist_record", "on_delete_session"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_test(hook):
    pattern = re.compile(rf"def {hook}\(|\.{hook}\(")
    files = [p for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name]
    users = [p.name for p in files if pattern.search(p.read_text("utf-8"))]
    assert users, f"no test implements or calls the hook {hook!r}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented_with_its_exact_signature(hook):
    text = CONTRIBUTING.read_text("utf-8")
    assert re.search(rf"^### `{hook}`", text, re.M), f"CONTRIBUTING.md has no '### `{hook}`' section"
    section = text.split(f"### `{hook}`", 1)[1].split("\n### ", 1)[0]
    assert squeeze(signature(hook)) in squeeze(section), f"signature of {hook} missing: {signature(hook)}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hookspec_says_how_it_is_called(hook):
    fn = getattr(hookspecs, hook)
    doc = inspect.getdoc(fn) or ""
    assert len(doc) > 80, f"{hook} needs a docstring: who calls it, when, what None means"
    if getattr(fn, SPEC_ATTR).get("firstresult"):
        assert "Stops at the first non-None result" in doc
    else:
        assert "Broadcast" in doc


def test_contributing_documents_no_hook_that_does_not_exist():
    documented = re.findall(r"^### `(\w+)`", CONTRIBUTING.read_text("utf-8"), re.M)
    assert set(documented) <= set(HOOKS)


# --- packaging --------------------------------------------------------------------------------


def test_installed_metadata_lists_exactly_the_builtin_plugins():
    ours = metadata.distribution("progressive-compactor").entry_points
    names = sorted(ep.name for ep in ours if ep.group == GROUP)
    assert names == sorted(BUILTIN_PLUGINS), "stale install? run: pip install -e ."
    assert len(set(BUILTIN_PLUGINS)) == len(BUILTIN_PLUGINS)


def test_pyproject_declares_exactly_the_builtin_plugins():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert sorted(project["entry-points"][GROUP]) == sorted(BUILTIN_PLUGINS)


@pytest.mark.parametrize("name", BUILTIN_PLUGINS)
def test_every_builtin_imports(name):
    assert load_plugin_object(installed_plugins()[name]) is not None


@pytest.mark.parametrize("name", load_config("default").plugins.names())
def test_the_defaults_are_trylast_so_any_plugin_overrides_them(name):
    target = load_plugin_object(installed_plugins()[name])
    impls = {
        attr: getattr(member, IMPL_ATTR)
        for attr, member in inspect.getmembers(target)
        if hasattr(member, IMPL_ATTR)
    }
    assert impls, f"{name} implements no hook"
    for hook, opts in impls.items():
        if getattr(getattr(hookspecs, hook), SPEC_ATTR).get("firstresult"):
            assert opts.get("trylast"), f"{name}.{hook} must be trylast=True"
