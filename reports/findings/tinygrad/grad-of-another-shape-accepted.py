"""A .grad of another shape is accepted; the next backward() accumulates into it.

Standalone: plain tinygrad (and torch for the expected side), no conformance import.
x has shape (3,); x.grad = ones(2, 3) is accepted, and (x * 2).sum().backward() adds the (3,)
gradient into it by broadcasting: x.grad ends with shape (2, 3). (A .grad that does not
broadcast makes that backward raise instead.) PyTorch refuses the assignment.
"""
import importlib.metadata
import os
import platform
import subprocess
import sys

os.environ.setdefault("DEV", "CPU")

TINYGRAD = """
from tinygrad import Tensor
x = Tensor([1., 2., 3.])
x.grad = Tensor.ones(2, 3)
(x * 2).sum().backward()
print("assignment accepted; after backward x.grad has shape", x.grad.shape, "=", x.grad.tolist())
"""


def expected():
    try:
        import torch
    except ImportError:
        return ("raises RuntimeError: attempting to assign a gradient of size '[2, 3]' to a "
                "tensor of size '[3]'. (PyTorch 2.13.0, recorded: torch is not installed here)")
    x = torch.tensor([1., 2., 3.], requires_grad=True)
    try:
        x.grad = torch.ones(2, 3)
    except RuntimeError as exc:
        return f"raises RuntimeError: {str(exc).splitlines()[0]}"
    (x * 2).sum().backward()
    return f"x.grad = {x.grad.tolist()}"


def actual():
    done = subprocess.run([sys.executable, "-c", TINYGRAD], capture_output=True, text=True)
    if done.returncode < 0:
        return f"the process died with signal {-done.returncode}"
    if done.returncode:
        return f"raises {done.stderr.strip().splitlines()[-1]}"
    return done.stdout.strip()


from tinygrad import Device  # noqa: E402 - after DEV is set

print(f"tinygrad {importlib.metadata.version('tinygrad')}, Python {platform.python_version()}, "
      f"{platform.platform()}, device {Device.DEFAULT}")
print("expected:", expected())
print("actual:  ", actual())
