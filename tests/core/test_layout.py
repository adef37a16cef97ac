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


def absolute(name: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, relative ones resolved against ``name``."""
    if not node.level:
        return str(node.module)
    package = name if is_package(name) else name.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def dotted(node: ast.expr) -> list[str] | None:
    """``["a", "b", "c"]`` for the expression ``a.b.c``; None for anything else."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else [*head, node.attr]
    return None


def imports(name: str) -> list[tuple[int, str, list[str]]]:
    """Each import of the package by ``name``: (line, imported module, names taken from it).

    ``from P import m`` where ``P.m`` is a module (and ``m`` not a name ``P``
    exports) imports that module. Attribute chains read from an imported name
    (``rn._src.reward.center``, ``ow.check_flag``) count too: the longest module
    they name, and the name taken from it.
    """
    tree = ast.parse(MODULES[name].read_text())
    found: list[tuple[int, str, list[str]]] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and absolute(name, node).startswith("rewardnorm_jax"):
            module, taken = absolute(name, node), []
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
                    # "import a.b.c" binds "a"; "import a.b.c as m" binds the module
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else local
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):  # whole chains only: a.b.c, not its a.b
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        parts = dotted(node)
        if not parts or parts[0] not in aliases:
            continue
        parts = aliases[parts[0]].split(".") + parts[1:]
        for end in range(len(parts) - 1, 0, -1):  # the longest module the chain names
            module = ".".join(parts[:end])
            if module in MODULES:
                found.append((node.lineno, module, [parts[end]]))
                break
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


def test_src_holds_only_the_layers_and_families_as_packages():
    entries = [path for path in (PACKAGE / "_src").iterdir() if path.name != "__pycache__"]
    assert all(path.is_dir() and (path / "__init__.py").exists() for path in entries), entries
    assert sorted(path.name for path in entries) == sorted([*SHARED, *FAMILIES])


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
        "from ..llm import whiten\n"
        "import rewardnorm_jax as rn\nrn._src.observation.wrapper.check_placement\n"
        "from rewardnorm_jax._src import reward\nreward.center_reward\n"  # its own family
    )
    monkeypatch.setitem(MODULES, f"{SRC}.reward.fake", fake)
    wrong = violations(f"{SRC}.reward.fake")
    expected = [
        "line 1: imports rewardnorm_jax._src.observation.normalizer, a private module",
        "line 3: takes ['transforms'] from rewardnorm_jax._src.value, not in its __all__",
        "line 4: imports rewardnorm_jax._src.llm.whiten, a private module of the llm family",
        "line 6: imports rewardnorm_jax._src.observation.wrapper, a private module",
    ]
    assert len(wrong) == len(expected), wrong
    for text in expected:
        assert any(text in line for line in wrong), (text, wrong)


def test_no_import_cycle():
    """Modules import each other without a cycle.

    Importing ``a.b.m`` runs the ``__init__`` of ``a.b`` first (below ``_src``),
    unless the importer is itself inside ``a.b``.
    """
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for _, target, _ in imports(name):
            if target in MODULES and target != name:
                graph[name].add(target)
            parts = target.split(".")
            for depth in range(3, len(parts)):
                step = ".".join(parts[:depth])
                if step in MODULES and step != name and not name.startswith(step + "."):
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
