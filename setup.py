"""Ship the specification (and the reference's hand-written pages) inside the package.

The repository keeps the data at the top level (`spec/`: cases, schema, features, API vocabulary,
sources, claims, the case language), where authors and other runners read it. A wheel must carry
it too, so that an installed `autograd-conformance` needs no checkout: building copies `spec/`
into the package as `conformance/spec/`, which `conformance.casefile.files.DEFAULT_SPEC_DIR`
prefers when it is there (MANIFEST.in puts `spec/` into an sdist, so a wheel built from one has
it too). Everything else about the build is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SPEC = ROOT / "spec"
SPEC_PATTERNS = ("*.yaml", "*.json", "*.md", "cases/*.yaml")
# The hand-written pages of the reference (the adapter guide) sit beside spec/ in the
# repository, and beside conformance/spec/ in the package.
DOCS = ROOT / "docs"


def spec_files() -> list[Path]:
    return sorted({path for pattern in SPEC_PATTERNS for path in SPEC.glob(pattern)})


def shipped_files() -> list[tuple[Path, Path]]:
    """(source, path inside the package) of every data file the wheel carries."""
    return ([(path, Path("spec") / path.relative_to(SPEC)) for path in spec_files()]
            + [(path, Path("docs") / path.name) for path in sorted(DOCS.glob("*.md"))])


class BuildPyWithSpec(build_py):
    """`build_py` that also writes `spec/` into the built package as `conformance/spec/`."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # An editable install reads spec/ of the checkout itself.
        package = Path(self.build_lib) / "conformance"
        for folder in ("spec", "docs"):
            if (package / folder).exists():
                shutil.rmtree(package / folder)
        for source, inside in shipped_files():
            out = package / inside
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        package = Path(self.build_lib) / "conformance"
        return [*super().get_outputs(include_bytecode),
                *(str(package / inside) for _, inside in shipped_files())]


setup(cmdclass={"build_py": BuildPyWithSpec})
