"""Ship the specification inside the package.

The repository keeps the data at the top level (`spec/`: cases, schema, features, API vocabulary,
sources, claims, the case language), where authors and other runners read it. A wheel must carry
it too, so that an installed `autograd-conformance` needs no checkout: building copies `spec/`
into the package as `conformance/spec/`, which `conformance.loader.DEFAULT_SPEC_DIR` prefers when
it is there (MANIFEST.in puts `spec/` into an sdist, so a wheel built from one has it too).
Everything else about the build is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SPEC = Path(__file__).resolve().parent / "spec"
SPEC_PATTERNS = ("*.yaml", "*.json", "*.md", "cases/*.yaml")


def spec_files() -> list[Path]:
    return sorted({path for pattern in SPEC_PATTERNS for path in SPEC.glob(pattern)})


class BuildPyWithSpec(build_py):
    """`build_py` that also writes `spec/` into the built package as `conformance/spec/`."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # An editable install reads spec/ of the checkout itself.
        target = Path(self.build_lib) / "conformance" / "spec"
        if target.exists():
            shutil.rmtree(target)
        for path in spec_files():
            out = target / path.relative_to(SPEC)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        target = Path(self.build_lib) / "conformance" / "spec"
        return [*super().get_outputs(include_bytecode),
                *(str(target / path.relative_to(SPEC)) for path in spec_files())]


setup(cmdclass={"build_py": BuildPyWithSpec})
