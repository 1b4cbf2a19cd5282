"""A 0-d tensor made from a Python number gets no gradient from backward().

Standalone: plain tinygrad (and torch for the expected side), no conformance import.
Tensor(3.0, dtype=dtypes.float32) is a CONST with no device; Tensor.backward fills .grad only
for "every in-scope float tensor with a device", so x.grad stays None, while
y.gradient(x) gives 9.0. PyTorch: x.grad is 9.0.
"""
import importlib.metadata
import os
import platform
import subprocess
import sys

os.environ.setdefault("DEV", "CPU")

TINYGRAD = """
from tinygrad import Tensor, dtypes
x = Tensor(3.0, dtype=dtypes.float32)
y = x * x + 3 * x + 2
y.backward()
print("x.grad =", None if x.grad is None else x.grad.item(),
      "| y.gradient(x) =", (x * x + 3 * x + 2).gradient(x)[0].item())
"""


def expected():
    try:
        import torch
    except ImportError:
        return "x.grad = 9.0 (PyTorch 2.13.0, recorded: torch is not installed here)"
    x = torch.tensor(3.0, requires_grad=True)
    (x * x + 3 * x + 2).backward()
    return f"x.grad = {x.grad.item()}"


def actual():
    done = subprocess.run([sys.executable, "-c", TINYGRAD], capture_output=True, text=True)
    if done.returncode < 0:
        return f"the process died with signal {-done.returncode}"
    if done.returncode:
        last = done.stderr.strip().splitlines()[-1]
        return f"raises {last}"
    return done.stdout.strip()


from tinygrad import Device  # noqa: E402 - after DEV is set

print(f"tinygrad {importlib.metadata.version('tinygrad')}, Python {platform.python_version()}, "
      f"{platform.platform()}, device {Device.DEFAULT}")
print("expected:", expected())
print("actual:  ", actual())
