"""autograd differentiates np.diagonal only with offset=0 over the last two axes.

Standalone: plain HIPS autograd, and PyTorch for the expected side when it is installed; no import of
the conformance project. Each side runs in its own process, so a crash is reported rather than
suffered.
"""
import importlib.metadata
import platform
import subprocess
import sys

PACKAGE = "autograd"

ENGINE = """
import numpy as np
import autograd.numpy as anp
from autograd import grad
x = np.arange(9.0).reshape(3, 3)
try:
    g = grad(lambda x: anp.sum(anp.diagonal(x, 1)))(x)
    print(f"gradient {g.tolist()}")
except Exception as exc:
    print(f"raises {type(exc).__name__}: {exc}")"""

TORCH = """
import torch
x = torch.arange(9.0, dtype=torch.float64).reshape(3, 3).requires_grad_()
torch.diagonal(x, 1).sum().backward()
print(f"gradient {x.grad.tolist()}")"""

RECORDED = 'gradient [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]'
"""What PyTorch 2.13.0 prints for TORCH, shown when torch is not installed here."""


def outcome(program, timeout=120):
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"the process hung and was killed after {timeout} s"
    if done.returncode < 0:
        return f"the process died with signal {-done.returncode}"
    if done.returncode:
        err = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return f"exit status {done.returncode}: {(err or ['(no message)'])[-1].strip()}"
    return done.stdout.strip()


def expected():
    try:
        import torch  # noqa: F401
    except ImportError:
        return RECORDED + " (PyTorch 2.13.0, recorded: torch is not installed here)"
    return outcome(TORCH)


print(f"{PACKAGE} {importlib.metadata.version(PACKAGE)}, Python {platform.python_version()}, "
      f"{platform.platform()}, device CPU")
print("expected:", expected())
print("actual:  ", outcome(ENGINE))
