"""autograd's np.clip cannot be differentiated with respect to its bounds.

numpy_vjps.py defines clip's vjp for the array argument only: the gradient of an array bound
raises NotImplementedError ("VJP of clip wrt argnum 0 not defined"), and asking for several
arguments at once (make_vjp(f, (0, 1, 2))) raises a bare KeyError from autograd's core.

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
x = np.array([0.0, 1.0, 2.0, -1.0, 3.0])
lo = np.zeros(5)
hi = np.full(5, 2.0)
try:
    g = grad(lambda lo: anp.sum(anp.clip(x, lo, hi)))(lo)
    print(f"gradient of lo {g.tolist()}")
except Exception as exc:
    print(f"raises {type(exc).__name__}: {exc}")"""

TORCH = """
import torch
x = torch.tensor([0.0, 1.0, 2.0, -1.0, 3.0], dtype=torch.float64)
lo = torch.zeros(5, dtype=torch.float64, requires_grad=True)
hi = torch.full((5,), 2.0, dtype=torch.float64)
x.clamp(lo, hi).sum().backward()
print(f"gradient of lo {lo.grad.tolist()}")"""

RECORDED = 'gradient of lo [0.0, 0.0, 0.0, 1.0, 0.0]'
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
