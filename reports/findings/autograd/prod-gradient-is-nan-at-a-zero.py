"""autograd's np.prod has a NaN gradient at an element that is zero, where the product is smooth.

prod([0, 2, 3]) has the gradient [6, 0, 0] (the product of the other elements); autograd's vjp
divides the product by each element and gets [nan, 0, 0] ([nan, nan, 0] for two zeros, where
the answer is [0, 0, 0]).

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
import warnings
warnings.simplefilter("ignore")
import numpy as np
import autograd.numpy as anp
from autograd import grad
one = grad(anp.prod)(np.array([0.0, 2.0, 3.0])).tolist()
two = grad(anp.prod)(np.array([0.0, 0.0, 3.0])).tolist()
print(f"one zero: {one}; two zeros: {two}")"""

TORCH = """
import torch
grads = []
for values in ([0.0, 2.0, 3.0], [0.0, 0.0, 3.0]):
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    torch.prod(x).backward()
    grads.append(x.grad.tolist())
print(f"one zero: {grads[0]}; two zeros: {grads[1]}")"""

RECORDED = 'one zero: [6.0, 0.0, 0.0]; two zeros: [0.0, 0.0, 0.0]'
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
