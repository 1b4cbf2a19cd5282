"""autograd's np.where gives an operand it broadcast a gradient of the result's shape.

np.where(c, x, y) with x of shape (3,) and y a 0-d array: the gradient of sum(where(...)) with
respect to y is the number of positions that chose y, a 0-d value (1.0 here); autograd returns
the unreduced array [1., 0., 0.] of shape (3,). Its vjp for where (numpy_vjps.py) is
where(c, 0, g) with no unbroadcast, as every other broadcasting op of autograd has. Summed
into a 0-d gradient elsewhere, it raises ValueError (non-broadcastable output operand).

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
c = np.array([False, True, True])
x = np.array([1.0, 2.0, 3.0])
g = grad(lambda y: anp.sum(anp.where(c, x, y)))(np.array(0.0))
print(f"shape {list(np.shape(g))}, value {np.asarray(g).tolist()}")"""

TORCH = """
import torch
c = torch.tensor([False, True, True])
x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
y = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
torch.where(c, x, y).sum().backward()
print(f"shape {list(y.grad.shape)}, value {y.grad.tolist()}")"""

RECORDED = 'shape [], value 1.0'
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
