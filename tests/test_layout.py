"""The floors of the code: no import circle, the machinery knows no data set.

`multigpu/` stands at the ground: it imports no data-set or model module;
the data sets (`data_sets/`, `cifar10_input`, `mnist_input`) and the models
stand on it, the scripts on top. The imports are read from the source (every
`import` and `from ... import`, those inside functions too), so a lazy
import cannot hide a circle.
"""

import ast
import re

from helpers.modules import ROOT, project_modules

# What the machinery must never import: the data sets and the models.
DATA_AND_MODELS = (
    "cifar10_input",
    "cifar10",
    "mnist_input",
    "mnist_model",
    "data_sets",
    "cifar10_models",
)

# Modules that may not be longer than this (STYLE: a module past 500 lines
# is two concerns).
MAX_MODULE_LINES = 500
# STYLE.md: no function over 60 lines of code (its signature, docstring,
# comments and blank lines not counted), the tests', benchmarks' and
# verification tools' too.
MAX_FUNCTION_CODE_LINES = 60
# No product function takes 10 parameters or more, and at most 4 take 7 or
# more (self and cls not counted): values that travel together become a
# named value.
MAX_PARAMETERS = 9
LONG_PARAMETER_LIST = 7
MAX_LONG_PARAMETER_LISTS = 4
# The 2017 tutorial's own scripts, kept as they were for the tests to run.
TUTORIAL_SCRIPTS = ROOT / "tests" / "tutorial_scripts_2017"


def imported_modules(path, known):
    """The project modules that one file imports, as dotted names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [
                "%s.%s" % (node.module, alias.name) for alias in node.names
            ]
        else:
            continue
        for name in names:
            # `from pkg import mod` names the module pkg.mod; `from mod
            # import NAME` names mod itself.
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph(root):
    """{module: set of the project modules it imports} of a checkout."""
    modules = project_modules(root)
    return {
        name: imported_modules(path, modules) - {name}
        for name, path in modules.items()
    }


def circles(graph):
    """Lists the import circles of a graph: its strongly connected
    components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_project_modules_import_each_other_even_through_others():
    assert circles(import_graph(ROOT)) == []


def test_the_circle_check_finds_a_circle_made_by_a_lazy_import(tmp_path):
    (tmp_path / "multigpu").mkdir()
    (tmp_path / "multigpu" / "__init__.py").write_text("")
    (tmp_path / "multigpu" / "a.py").write_text("from multigpu import b\n")
    (tmp_path / "multigpu" / "b.py").write_text(
        "def f():\n    import multigpu.c\n"
    )
    (tmp_path / "multigpu" / "c.py").write_text("from multigpu.a import x\n")
    (tmp_path / "top.py").write_text("from multigpu import a\n")
    assert circles(import_graph(tmp_path)) == [
        ["multigpu.a", "multigpu.b", "multigpu.c"]
    ]


def test_the_machinery_imports_no_data_set_and_no_model():
    graph = import_graph(ROOT)
    climbs = sorted(
        (module, other)
        for module, imports in graph.items()
        if module.split(".")[0] == "multigpu"
        for other in imports
        if other.split(".")[0] in DATA_AND_MODELS
    )
    assert climbs == []
    # The check sees the machinery's own imports, so it is not vacuous.
    assert "multigpu.graph.placement" in graph["multigpu.graph.towers"]


def test_no_module_of_the_product_is_longer_than_500_lines():
    long_modules = {
        name: len(path.read_text().splitlines())
        for name, path in project_modules(ROOT).items()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    assert long_modules == {}


def _functions(source):
    """The function definitions of source, nested ones included."""
    return [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def code_lines(node, lines):
    """The lines of code of a function: from its body's first statement
    after its docstring to its end, less blank and comment lines."""
    body = node.body
    if (
        len(body) > 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return sum(
        1
        for line in lines[body[0].lineno - 1 : node.end_lineno]
        if line.strip() and not line.strip().startswith("#")
    )


def long_functions(source):
    """{name: lines of code} of source's functions over
    MAX_FUNCTION_CODE_LINES (`code_lines`)."""
    lines = source.splitlines()
    counts = {node.name: code_lines(node, lines) for node in _functions(source)}
    return {
        name: n for name, n in counts.items() if n > MAX_FUNCTION_CODE_LINES
    }


def parameters(node):
    """How many parameters a function takes, self and cls not counted."""
    args = node.args
    names = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    names += [arg for arg in (args.vararg, args.kwarg) if arg]
    if args.args and args.args[0].arg in ("self", "cls"):
        names = names[1:]
    return len(names)


def test_the_function_check_counts_code_not_the_signature_and_docstring():
    body = "".join("        x%d = %d\n" % (i, i) for i in range(59))
    signature = "def outer(\n    a,\n    b,\n):\n"
    docstring = '    """A docstring\n\n    of four lines.\n    """\n'
    source = (
        signature
        + docstring
        + "    # A comment.\n\n    def inner():\n"
        + body
        + "        return x0\n"
    )
    assert long_functions(source) == {"outer": 61}
    assert long_functions(source.replace("        x58 = 58\n", "")) == {}


def test_the_parameter_count_leaves_out_self_and_counts_every_kind():
    source = (
        "class A:\n"
        "    def f(self, a, b, *c, d, **e):\n"
        "        pass\n"
        "def g(cls_, a=1):\n"
        "    pass\n"
    )
    counts = {node.name: parameters(node) for node in _functions(source)}
    assert counts == {"f": 5, "g": 2}


def test_no_product_function_takes_10_parameters_and_4_at_most_take_7():
    counts = {
        "%s:%s" % (name, node.name): parameters(node)
        for name, path in project_modules(ROOT).items()
        for node in _functions(path.read_text())
    }
    assert len(counts) > 500
    assert {f: n for f, n in counts.items() if n > MAX_PARAMETERS} == {}
    long_lists = sorted(
        f for f, n in counts.items() if n >= LONG_PARAMETER_LIST
    )
    assert len(long_lists) <= MAX_LONG_PARAMETER_LISTS, long_lists


def test_no_function_of_the_project_has_over_60_lines_of_code():
    paths = [
        *project_modules(ROOT).values(),
        *(ROOT / "benchmarks").glob("*.py"),
        *(ROOT / "verification").glob("*.py"),
        *(
            path
            for path in (ROOT / "tests").rglob("*.py")
            if TUTORIAL_SCRIPTS not in path.parents
        ),
    ]
    found = {
        str(path.relative_to(ROOT)): long_functions(path.read_text())
        for path in paths
    }
    assert len(paths) > 150
    assert {path: names for path, names in found.items() if names} == {}


# The machinery's floors, lowest first: a module imports from its own floor
# or one below (docs/layout.md).
FLOORS = (
    "multigpu",
    "multigpu.graph",
    "multigpu.train_dir",
    "multigpu.distributed",
    "multigpu.run",
    "multigpu.flags",
)


def floor_of(module):
    """The index in FLOORS of a machinery module's package."""
    package = module.rpartition(".")[0]
    return FLOORS.index(package if package in FLOORS else module)


def climbs(graph):
    """[(module, imported)]: the machinery's imports that go up a floor."""
    return sorted(
        (module, other)
        for module, imports in graph.items()
        if module.split(".")[0] == "multigpu"
        for other in imports
        if other.split(".")[0] == "multigpu"
        and floor_of(other) > floor_of(module)
    )


def test_no_import_inside_the_machinery_goes_up_a_floor():
    graph = import_graph(ROOT)
    assert climbs(graph) == []
    # The check sees imports across floors, so it is not vacuous.
    assert "multigpu.graph.summaries" in graph["multigpu.run.training"]


def test_the_floor_check_finds_the_graph_importing_the_loop():
    graph = {
        "multigpu.graph.towers": {"multigpu.run.training", "multigpu.errors"},
        "multigpu.run.training": {"multigpu.graph.towers"},
    }
    assert climbs(graph) == [("multigpu.graph.towers", "multigpu.run.training")]


def test_the_modes_table_names_the_reductions_which_import_it_not():
    graph = import_graph(ROOT)
    # One table: each row's reduction is a column of variable_update's
    # modes, so no second table keyed by the same rows.
    assert (
        "multigpu.graph.gradient_reduction"
        in graph["multigpu.graph.variable_update"]
    )
    assert (
        "multigpu.graph.variable_update"
        not in graph["multigpu.graph.gradient_reduction"]
    )


def top_level_imports(path):
    """The first part of each name a file imports, lazily too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_the_verification_tools_stand_apart_from_tests_and_benchmarks():
    # Installed with the suite, they import neither the tests nor the
    # benchmarks; nothing outside tests/ imports the tests (tests/helpers/
    # is `helpers` to them), and benchmarks/ holds no runner of theirs.
    tools = sorted((ROOT / "verification").glob("*.py"))
    benchmarks = sorted((ROOT / "benchmarks").glob("*.py"))
    found = sorted(
        (str(path.relative_to(ROOT)), name)
        for path in [*project_modules(ROOT).values(), *tools, *benchmarks]
        for name in top_level_imports(path)
        if name in ("tests", "helpers", "conftest")
        or (path in tools and name == "benchmarks")
    )
    assert found == []
    runners = [
        path.name
        for path in benchmarks
        if re.match(r"(equivalence|accident|planted)", path.name)
    ]
    assert runners == []
    # The check reads the tools' imports, so it is not vacuous.
    assert "verification" in top_level_imports(tools[1])


def modules_by_floor(root):
    """{floor index: set of module names} of the machinery's modules."""
    found = {}
    for path in (root / "multigpu").rglob("*.py"):
        if path.stem != "__init__":
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            found.setdefault(floor_of(module), set()).add(path.stem)
    return found


def page_map(page):
    """{floor index: set of module names} of the layout page's table rows
    `| floor | `folder` | `module` | what it holds |`."""
    found = {}
    for floor, folder, module in re.findall(
        r"^\| (\d) \| `([\w/]+)` \| `(\w+)` \|", page, re.M
    ):
        assert FLOORS[int(floor)].replace(".", "/") + "/" == folder
        found.setdefault(int(floor), set()).add(module)
    return found


def docstring_map(docstring):
    """{floor index: set of module names} of the package docstring's
    bullets `- `folder/`, what it is: `module`, ...`, in FLOORS' order."""
    bullets = re.findall(
        r"^- `([\w/]+)`(.*?)(?=^- |^$)", docstring, re.M | re.S
    )
    found = {}
    for floor, (folder, text) in enumerate(bullets):
        assert FLOORS[floor].rpartition(".")[2] + "/" == folder
        found[floor] = set(re.findall(r"`(\w+)`", text))
    return found


def test_the_layout_page_and_the_package_docstring_map_every_floor():
    actual = modules_by_floor(ROOT)
    docstring = ast.get_docstring(
        ast.parse((ROOT / "multigpu" / "__init__.py").read_text())
    )
    assert page_map((ROOT / "docs" / "layout.md").read_text()) == actual
    assert docstring_map(docstring) == actual
    # Every floor has modules, so a missing row or bullet would show.
    assert sorted(actual) == list(range(len(FLOORS)))


# The entry scripts: they define their flags at their top and read them in
# main() only, which passes plain values down.
SCRIPTS = (
    "cifar10_train",
    "cifar10_multi_gpu_train",
    "cifar10_eval",
    "mnist_multi_gpu_train",
)
# The tutorial's model module defines its three flags, and its no-argument
# tutorial calls read them (SPEC: compatibility).
TUTORIAL_FLAGS_MODULE = "cifar10"
# The one package below the scripts that sees a flags object: it defines,
# checks and explains the flags and turns them into plain values.
FLAGS_PACKAGE = "multigpu.flags"
# The names a parameter that takes a flags object goes by.
FLAGS_PARAMETERS = ("FLAGS", "flags", "flag_values")


def flags_reads_outside_main(path):
    """[(function, line)]: where a script names FLAGS in a function or
    class other than main (its top level only defines flags: it runs at
    import, before they are parsed)."""
    found = []
    for statement in ast.parse(path.read_text(), str(path)).body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "main":
            continue
        if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            scope = statement.name
            nodes = ast.walk(statement)
        else:
            # A validator's lambda at the top runs after parsing.
            scope = "lambda"
            nodes = (
                node
                for lam in ast.walk(statement)
                if isinstance(lam, ast.Lambda)
                for node in ast.walk(lam)
            )
        found += [
            (scope, node.lineno)
            for node in nodes
            if isinstance(node, ast.Name) and node.id == "FLAGS"
        ]
    return found


def flags_objects(path):
    """[(what, line)]: where a module imports absl's flags, names FLAGS or
    takes a parameter named as a flags object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "absl":
            found += [
                ("import absl.flags", node.lineno)
                for alias in node.names
                if alias.name == "flags"
            ]
        elif isinstance(node, ast.Import):
            found += [
                ("import absl.flags", node.lineno)
                for alias in node.names
                if alias.name == "absl.flags"
            ]
        elif isinstance(node, ast.Name) and node.id == "FLAGS":
            found.append(("FLAGS", node.lineno))
        elif isinstance(node, ast.Attribute) and node.attr == "FLAGS":
            found.append(("FLAGS", node.lineno))
        elif isinstance(node, ast.arg) and node.arg in FLAGS_PARAMETERS:
            found.append(("parameter " + node.arg, node.lineno))
    return found


def below_the_scripts(root):
    """{module: path} of the modules that may not see a flags object."""
    return {
        name: path
        for name, path in project_modules(root).items()
        if name not in SCRIPTS + (TUTORIAL_FLAGS_MODULE,)
        and not (name + ".").startswith(FLAGS_PACKAGE + ".")
    }


def test_the_scripts_read_their_flags_in_main_only():
    reads = {
        script: flags_reads_outside_main(ROOT / (script + ".py"))
        for script in SCRIPTS
    }
    assert {script: found for script, found in reads.items() if found} == {}


def test_no_module_below_the_scripts_but_the_flags_package_sees_flags():
    seen = {
        name: flags_objects(path)
        for name, path in below_the_scripts(ROOT).items()
    }
    assert {name: found for name, found in seen.items() if found} == {}
    # The checks see what they look for, so they are not vacuous.
    assert "FLAGS" in [name for name, _ in flags_objects(ROOT / "cifar10.py")]
    assert "multigpu.flags.common_flags" not in below_the_scripts(ROOT)


def test_the_flags_checks_find_a_read_below_main_and_a_flags_parameter(
    tmp_path,
):
    script = tmp_path / "script.py"
    script.write_text(
        "from absl import flags\n"
        "FLAGS = flags.FLAGS\n"
        "flags.DEFINE_integer('steps', 1, 'Steps.')\n"
        "def main(argv):\n"
        "    return _train(FLAGS.steps)\n"
        "def _train(steps):\n"
        "    return steps * FLAGS.steps\n"
    )
    library = tmp_path / "library.py"
    library.write_text("def task(flag_values):\n    return flag_values.x\n")
    assert flags_reads_outside_main(script) == [("_train", 7)]
    assert flags_objects(library) == [("parameter flag_values", 1)]
