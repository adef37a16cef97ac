"""The package's layout: families reach each other only through public names, and no cycle.

``rewardnorm_jax/_src`` holds the machinery (``core``), the statistics
(``stats``) and one folder per family. A family may import the machinery, the
statistics and its own modules; another family only as its package, by the
names that package exports (``__all__``). The machinery and the statistics
import no family. The adapters and the top-level package follow the families'
rule. Read from the source (no import), so a broken rule names its line.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).parents[2] / "rewardnorm_jax"
SRC = "rewardnorm_jax._src"
SHARED = ("core", "stats")  # the machinery and the statistics: anyone may import their modules
FAMILIES = sorted(
    path.name
    for path in (PACKAGE / "_src").iterdir()
    if (path / "__init__.py").exists() and path.name not in SHARED
)
MAX_MODULES = 10


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return name in MODULES and MODULES[name].name == "__init__.py"


def family_of(name: str) -> str | None:
    """``"reward"`` for ``rewardnorm_jax._src.reward.center``; None outside ``_src``."""
    parts = name.split(".")
    return parts[2] if name.startswith(SRC + ".") else None


def exported(package: str) -> set[str]:
    """A package's ``__all__``, read from its source (empty for a module or a namespace)."""
    if not is_package(package):
        return set()
    for node in ast.parse(MODULES[package].read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def imports(name: str) -> list[tuple[int, str, list[str]]]:
    """Each import of the package by ``name``: (line, imported module, names taken from it).

    ``from P import m`` where ``P.m`` is a module (and ``m`` not a name ``P``
    exports) imports that module; an
    ``import P as p`` or ``from Q import P as p`` of a package takes the
    attributes ``p.x`` the module reads.
    """
    tree = ast.parse(MODULES[name].read_text())
    found: list[tuple[int, str, list[str]]] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rewardnorm_jax"):
            module, taken = str(node.module), []
            for alias in node.names:
                target = f"{module}.{alias.name}"
                if target in MODULES and alias.name not in exported(module):
                    found.append((node.lineno, target, []))
                    aliases[alias.asname or alias.name] = target
                else:
                    taken.append(alias.name)
            if taken:
                found.append((node.lineno, module, taken))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rewardnorm_jax"):
                    found.append((node.lineno, alias.name, []))
                    aliases[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):  # attributes read from an imported package
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and is_package(aliases.get(node.value.id, ""))
        ):
            found.append((node.lineno, aliases[node.value.id], [node.attr]))
    return found


def violations(name: str) -> list[str]:
    """Where ``name`` reaches into another family's private modules or names."""
    own = family_of(name)
    wrong = []
    for line, target, names in imports(name):
        family = family_of(target)
        if family is None or family == own or family in SHARED or target == SRC:
            continue
        where = f"{name}, line {line}"
        if own in SHARED:
            wrong.append(f"{where}: the {own} layer imports the {family} family ({target})")
        elif target != f"{SRC}.{family}":
            wrong.append(f"{where}: imports {target}, a private module of the {family} family")
        else:
            private = sorted(set(names) - exported(target))
            if private:
                wrong.append(f"{where}: takes {private} from {target}, not in its __all__")
    return wrong


def test_the_families_are_the_folders_of_src():
    assert FAMILIES == ["llm", "observation", "reward", "value"]


@pytest.mark.parametrize("folder", [*SHARED, *FAMILIES])
def test_each_folder_holds_at_most_ten_modules_and_says_what_it_is_for(folder):
    path = PACKAGE / "_src" / folder
    modules = [module for module in path.glob("*.py") if module.name != "__init__.py"]
    assert 0 < len(modules) <= MAX_MODULES, sorted(module.name for module in modules)
    assert not [sub for sub in path.iterdir() if sub.is_dir() and sub.name != "__pycache__"]
    assert ast.get_docstring(ast.parse((path / "__init__.py").read_text()))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_exports_names_it_defines(family):
    package = f"{SRC}.{family}"
    assert exported(package)
    module = __import__(package, fromlist=["__all__"])
    assert all(hasattr(module, name) for name in module.__all__)


def test_no_module_reaches_into_another_familys_private_modules():
    wrong = [line for name in MODULES for line in violations(name)]
    assert not wrong, "\n".join(wrong)


def test_the_rule_catches_a_private_import(tmp_path, monkeypatch):
    """The checker itself: a family module importing another's private module is named."""
    fake = tmp_path / "center.py"
    fake.write_text(
        "from rewardnorm_jax._src.observation.normalizer import std\n"
        "from rewardnorm_jax._src import value\nvalue.transforms\n"
    )
    monkeypatch.setitem(MODULES, f"{SRC}.reward.fake", fake)
    wrong = violations(f"{SRC}.reward.fake")
    assert len(wrong) == 2, wrong
    assert "private module of the observation family" in wrong[0]
    assert "['transforms']" in wrong[1]


def test_no_import_cycle():
    """Modules import each other without a cycle.

    Importing ``a.b.m`` runs the ``__init__`` of ``a.b`` first (below ``_src``),
    unless the importer is itself inside ``a.b``.
    """
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for _, target, _ in imports(name):
            parts = target.split(".")
            for depth in range(3, len(parts) + 1):
                step = ".".join(parts[:depth])
                inside = name.startswith(step + ".") and depth < len(parts)
                if step in MODULES and step != name and not inside:
                    graph[name].add(step)
    done: set[str] = set()

    def visit(name, path):
        if name in path:
            cycle = [*path[path.index(name) :], name]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
