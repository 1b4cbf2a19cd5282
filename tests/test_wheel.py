"""An installed wheel is the whole product: built from this checkout, installed into a fresh
virtual environment, run from a folder with nothing beside it, it needs no checkout and no
source documents.

The venv gets the wheel itself (`pip install --no-deps`); its dependencies (NumPy, PyYAML,
torch...) are taken from the interpreter running these tests through a path entry appended
after the venv's own site-packages, so that the test needs no network. Such an entry's own
`.pth` files are not processed, so this checkout's editable install cannot leak into the venv:
the test also checks that every module it runs comes from the venv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy, so that the build leaves nothing in the checkout.
    source = tmp_path_factory.mktemp("source") / "autograd-conformance"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".tox", ".venv", ".hypothesis",
        ".pytest_cache", "reports", "findings"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(out), str(source)], cwd=out)
    wheels = list(out.glob("autograd_conformance-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


@pytest.fixture(scope="module")
def env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=False)
    python = home / "bin" / "python"
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                        "['purelib'])"], cwd=home).stdout.strip())
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--quiet", str(wheel)], cwd=home)
    (purelib / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return home


def test_wheel_carries_the_specification(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("case.schema.json", "features.yaml", "api.yaml", "sources.yaml",
                 "claims.yaml", "INTERPRETING.md", "cases/leaf.yaml", "cases/retain_grad.yaml"):
        assert f"conformance/spec/{data}" in names, data
    assert "conformance/expectations/mygrad.yaml" in names
    assert "conformance/docs/adapters.md" in names
    cases = {p.name for p in (ROOT / "spec" / "cases").glob("*.yaml")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("conformance/spec/cases/")} \
        == cases


def test_installed_package_runs_from_an_empty_folder(env: Path, tmp_path: Path) -> None:
    python, cli = str(env / "bin" / "python"), str(env / "bin" / "autograd-conformance")
    where = run([python, "-c", "import conformance, refimpl, conformance.casefile.loader as l; "
                 "print(conformance.__file__); print(refimpl.__file__); "
                 "print(l.DEFAULT_SPEC_DIR)"], cwd=tmp_path).stdout.split()
    assert all(path.startswith(str(env)) for path in where), where

    listed = run([cli, "list"], cwd=tmp_path).stdout.splitlines()
    assert len(listed) >= 300 and any(line.startswith("retain_grad.") for line in listed)
    lint = run([cli, "lint"], cwd=tmp_path).stdout
    assert " 0 problem(s)" in lint
    shown = run([cli, "show", "retain_grad.nonleaf-keeps-grad"], cwd=tmp_path).stdout
    assert "retain_grad()" in shown and str(env) in shown

    report = tmp_path / "report.json"
    engines = ["--engine", "refimpl"]
    if _has_torch():
        engines += ["--engine", "torch"]
    done = run([cli, "run", *engines, "--json", str(report), "-q"], cwd=tmp_path)
    assert "TOTAL" in done.stdout
    runs = json.loads(report.read_text())["engines"]
    assert {r["name"] for r in runs} == {e for e in engines if e != "--engine"}
    for engine in runs:
        assert engine["summary"]["failed"] == engine["summary"]["error"] == 0
        assert engine["summary"]["passed"] >= 300
    assert not any(tmp_path.glob("*.pyc")) and sorted(p.name for p in tmp_path.iterdir()) == [
        "report.json"], "the run writes only the report asked for"


def test_installed_pytest_plugin_runs_the_cases(env: Path, tmp_path: Path) -> None:
    done = run([str(env / "bin" / "python"), "-m", "pytest", "--pyargs", "conformance",
                "--engine", "refimpl", "-q", "-p", "no:cacheprovider", "-k", "retain_grad"],
               cwd=tmp_path)
    tail = done.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) >= 10 and "failed" not in tail, tail


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_installed_package_builds_the_reference(env: Path, tmp_path: Path) -> None:
    pytest.importorskip("sphinx", reason="the reference needs the docs extra (Sphinx)")
    site = tmp_path / "site"
    done = run([str(env / "bin" / "autograd-conformance"), "docs", "--out", str(site),
                "--engine", "refimpl"], cwd=tmp_path)
    assert "wrote" in done.stdout
    page = (site / "retain_grad.html").read_text(encoding="utf-8")
    assert 'id="retain_grad.nonleaf-keeps-grad"' in page
    guide = (site / "adapters.html").read_text(encoding="utf-8")
    assert "make_engine" in guide, "the adapter guide travels in the wheel"
