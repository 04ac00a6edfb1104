"""The project's own modules, as the layout tests read them."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent

# The folders whose modules make the product (tests, benchmarks and the
# verification tools stand outside the house; the tools import neither of
# the other two).
PACKAGES = ("multigpu", "data_sets", "cifar10_models")


def project_modules(root):
    """{dotted module name: path} of the top-level scripts and packages."""
    modules = {path.stem: path for path in root.glob("*.py")}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules
