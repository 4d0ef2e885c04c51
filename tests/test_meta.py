"""Meta-tests that keep hooks, tests, docs, layout and packaging in step.

* every hook is called by the core during some test (recorded by ``tests/hook_recorder.py``),
  and has a section in CONTRIBUTING.md with its exact signature and a ``:param`` per argument;
* every hookspec says how it is called (firstresult, role or broadcast);
* the installed entry-point metadata lists exactly ``BUILTIN_PLUGINS`` (catches a stale editable
  install), every built-in imports, and the defaults are ``trylast=True`` hookimpls;
* the layout's rules: plugins import only the declared plugin API, the kernel imports neither the
  CLI, nor the lab, nor the HTTP stack, and a compaction imports none of click, rich, httpx or
  plotly;
* no text cites a document the repository does not have;
* every setting a config accepts (the core's and every built-in plugin's) is named in the docs.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from hook_recorder import CALLED, HOOKS
from progressive_compactor import hookspecs, load_config
from progressive_compactor.cli import hookspecs as cli_hookspecs
from progressive_compactor.plugin_manager import BUILTIN_PLUGINS, GROUP, installed_plugins, load_plugin_object

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
SPEC_ATTR = f"{hookspecs.PROJECT}_spec"
IMPL_ATTR = f"{hookspecs.PROJECT}_impl"
KERNEL = sorted(p for p in (ROOT / "core").glob("*.py"))
PLUGIN_MODULES = sorted(p for p in (ROOT / "plugins").glob("*.py") if p.name != "__init__.py")


def signature(module: object, hook: str) -> str:
    """``def hook(args) -> result:`` exactly as the hookspec module declares it, on one line."""
    tree = ast.parse(Path(module.__file__).read_text("utf-8"))  # type: ignore[attr-defined]
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == hook)
    return next(line for line in ast.unparse(node).splitlines() if line.startswith("def "))


def squeeze(text: str) -> str:
    return re.sub(r"\s+|,(?=\s*\))", "", text)


def test_there_are_hooks():
    assert {"summarize", "offload", "fallback_compact", "persist_record", "on_delete_session", "read_records"} <= set(
        HOOKS
    )


def test_every_hook_is_called_by_a_test(request):
    """Runs last (``hook_recorder`` moves it there): each hook must have been called by the core
    while some test ran. A partial run (a subset of the files, ``-k``) cannot tell, and skips."""
    files = {Path(str(item.fspath)).name for item in request.session.items}
    all_files = {p.name for p in TESTS.glob("test_*.py")}
    deselected = request.config.getoption("keyword") or request.config.getoption("markexpr")
    if files != all_files or deselected:
        pytest.skip("run the whole suite to check that every hook is called by a test")
    assert sorted(set(HOOKS) - CALLED) == [], "hooks that no test made the core call"


@pytest.mark.parametrize(
    ("module", "hook"),
    [(hookspecs, h) for h in HOOKS] + [(cli_hookspecs, "register_commands")],
    ids=lambda v: v if isinstance(v, str) else v.__name__.rsplit(".", 1)[-1],
)
def test_every_hook_is_documented_with_its_exact_signature(module, hook):
    text = CONTRIBUTING.read_text("utf-8")
    found = re.search(rf"^### .*`{hook}`", text, re.M)
    assert found, f"CONTRIBUTING.md has no '### `{hook}`' section"
    section = text[found.end() :].split("\n### ", 1)[0]
    wanted = signature(module, hook).replace("cli: Any", "cli: click.Group")
    assert squeeze(wanted) in squeeze(section), f"signature of {hook} missing: {wanted}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hookspec_says_how_it_is_called_and_what_each_argument_is(hook):
    fn = getattr(hookspecs, hook)
    doc = inspect.getdoc(fn) or ""
    assert len(doc) > 80, f"{hook} needs a docstring: who calls it, when, what None means"
    options = getattr(fn, SPEC_ATTR)
    if options.get("firstresult"):
        assert "Stops at the first non-None result" in doc
    elif hook == "apply_tier":
        assert "role hook" in doc
    else:
        assert "Broadcast" in doc
    for name in inspect.signature(fn).parameters:
        assert f":param {name}:" in doc, f"{hook} documents no :param {name}:"


def test_contributing_documents_no_hook_that_does_not_exist():
    documented = re.findall(r"^### .*`(\w+)`", CONTRIBUTING.read_text("utf-8"), re.M)
    assert set(documented) <= {*HOOKS, "register_commands"}


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


def test_the_version_has_one_source():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert "version" not in project and "version" in project["dynamic"]
    import progressive_compactor

    assert metadata.version("progressive-compactor") == progressive_compactor.__version__


@pytest.mark.parametrize("name", BUILTIN_PLUGINS)
def test_every_builtin_imports(name):
    assert load_plugin_object(installed_plugins()[name]) is not None


@pytest.mark.parametrize("name", load_config("default").plugins.names())
def test_the_defaults_are_trylast_so_any_plugin_overrides_them(name):
    target = load_plugin_object(installed_plugins()[name])
    impls = {
        attr: getattr(member, IMPL_ATTR) for attr, member in inspect.getmembers(target) if hasattr(member, IMPL_ATTR)
    }
    assert impls, f"{name} implements no hook"
    for hook, opts in impls.items():
        if getattr(getattr(hookspecs, hook), SPEC_ATTR).get("firstresult"):
            assert opts.get("trylast"), f"{name}.{hook} must be trylast=True"


# --- layout -----------------------------------------------------------------------------------


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """``(module, level)`` of every import in a file (``level`` > 0 for a relative import)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


@pytest.mark.parametrize("path", PLUGIN_MODULES, ids=lambda p: p.name)
def test_plugins_import_only_the_declared_plugin_api(path):
    ours = [m for m, level in imported_modules(path) if level or m.startswith("progressive_compactor")]
    allowed = {"progressive_compactor.plugin", "progressive_compactor.http"}
    assert set(ours) <= allowed, f"{path.name} imports {sorted(set(ours) - allowed)}"


@pytest.mark.parametrize("path", KERNEL, ids=lambda p: p.name)
def test_the_kernel_does_not_import_the_cli_the_lab_or_http(path):
    for module, level in imported_modules(path):
        name = module if level == 0 else f"progressive_compactor.{module}"
        top = name.split(".")[:2]
        assert top[:2] not in (
            ["progressive_compactor", "cli"],
            ["progressive_compactor", "lab"],
            ["progressive_compactor", "http"],
        ) or path.name in ("plugin.py",), f"{path.name} imports {name}"
        assert name.split(".")[0] not in {"click", "rich", "httpx", "plotly"}, f"{path.name} imports {name}"


def test_a_compaction_imports_no_optional_dependency(tmp_path):
    code = f"""
import sys
from progressive_compactor import ProgressiveCompactor
from progressive_compactor.testing import build_history, window_for
history = build_history([3000] * 12)
compactor = ProgressiveCompactor("default", context_window=window_for(history, 0.85), data_dir={str(tmp_path)!r})
view, record = compactor.compact_with_record(history, "s1")
assert record.tier.name == "FULL", record.tier
print(",".join(sorted(m for m in ("click", "rich", "httpx", "plotly") if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_command_without_the_cli_extra_says_what_to_install():
    code = "import sys; sys.modules['click'] = None; from progressive_compactor.cli import main; main([])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert "pip install 'progressive-compactor[cli]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_compactor_module_reads_like_the_algorithm():
    lines = (ROOT / "core" / "compactor.py").read_text("utf-8").count("\n")
    assert lines < 500, f"core/compactor.py has {lines} lines: move a piece into its own module"


# --- text that stands alone -------------------------------------------------------------------

CITATION = re.compile(r"seed (section )?[0-9]|the seed|seed's|\.\./shared|issue [0-9]|(?-i:DESIGN\.md)", re.I)
GO_NAMES = re.compile(
    r"RecordedCompactor|ForceCompactor|OffloadHook|repairOrphanedToolPairs|CompactWithRecord|harness9"
)


def texts() -> list[Path]:
    found = [ROOT / "README.md", CONTRIBUTING, ROOT / "CHANGELOG.md"]
    for folder in ("core", "plugins", "configs", "docs", "tests", "benchmarks", "examples"):
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".yaml", ".md") and p.is_file()]
    return sorted(p for p in found if p.exists() and p != Path(__file__) and "egg-info" not in str(p))


@pytest.mark.parametrize("path", texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_cites_a_document_the_repository_does_not_have(path):
    text = path.read_text("utf-8")
    cited = [line.strip() for line in text.splitlines() if CITATION.search(line) or GO_NAMES.search(line)]
    assert cited == [], "write the fact instead of citing it"


def test_importing_the_library_imports_no_framework_tokenizer_or_telemetry(tmp_path):
    """The integrations, tiktoken and OpenTelemetry load only when their module or plugin is used."""
    code = f"""
import sys
import progressive_compactor, progressive_compactor.integrations
from progressive_compactor import ProgressiveCompactor
from progressive_compactor.testing import build_history
compactor = ProgressiveCompactor("default", context_window=8000, data_dir={str(tmp_path)!r})
compactor.compact_with_record(build_history([3000] * 12), "s1")
heavy = ("langchain", "langchain_core", "langgraph", "pydantic_ai", "agents", "openai", "tiktoken", "opentelemetry")
print(",".join(sorted(m for m in heavy if m in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


USER_DOCS = [
    ROOT / "README.md",
    CONTRIBUTING,
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "configs").glob("*.yaml")),
]


def documented(key: str, text: str) -> bool:
    """Whether ``key`` is named as a setting: in backticks, or as a YAML key."""
    k = re.escape(key)
    return bool(re.search(rf"`{k}[`:]|^\s*{k}:|[{{,]\s*{k}:", text, re.M))


def settings() -> list[tuple[str, str]]:
    """``(where, key)`` for every setting a config accepts: the core's, the plugin roles, the
    price table, the experiment section, and every built-in plugin's block."""
    import attrs

    from progressive_compactor.config import CompactorConfig, ExperimentSpec, PluginSelection, VariantSpec
    from progressive_compactor.pricing import PriceTable

    found = [
        (cls.__name__, f.name)
        for cls in (CompactorConfig, PluginSelection, PriceTable, ExperimentSpec, VariantSpec)
        for f in attrs.fields(cls)
    ]
    for name in BUILTIN_PLUGINS:
        config = getattr(load_plugin_object(installed_plugins()[name]), "Config", None)
        found += [(name, f.name) for f in attrs.fields(config)] if config is not None else []
    return found


def test_every_setting_is_named_in_the_docs():
    text = "\n".join(path.read_text("utf-8") for path in USER_DOCS)
    missing = [f"{where}: {key}" for where, key in settings() if not documented(key, text)]
    assert missing == [], "name these settings in README.md, docs/ or the configs' comments"
