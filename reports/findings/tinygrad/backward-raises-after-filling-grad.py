"""backward() with a gradient of the wrong shape fills x.grad, then raises.

Standalone: plain tinygrad (and torch for the expected side), no conformance import.
(x * 2).sum() is 0-d; backward(Tensor.ones(1)) is not refused up front: Tensor.backward
computes the gradients, stores x.grad = [2., 2., 2.], then its per-tensor shape assertion fails
on the next tensor of the graph (AssertionError). PyTorch refuses the gradient before running
anything and x.grad stays None.
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
try:
    (x * 2).sum().backward(Tensor.ones(1))
    raised = "nothing raised"
except Exception as exc:
    raised = f"raises {type(exc).__name__}: {str(exc).splitlines()[0]}"
print(raised, "| x.grad =", None if x.grad is None else x.grad.tolist())
"""


def expected():
    try:
        import torch
    except ImportError:
        return ("raises RuntimeError: Mismatch in shape: grad_output[0] has a shape of "
                "torch.Size([1]) and output[0] has a shape of torch.Size([]). | x.grad = None "
                "(PyTorch 2.13.0, recorded: torch is not installed here)")
    x = torch.tensor([1., 2., 3.], requires_grad=True)
    try:
        (x * 2).sum().backward(torch.ones(1))
        raised = "nothing raised"
    except RuntimeError as exc:
        raised = f"raises RuntimeError: {str(exc).splitlines()[0]}"
    return f"{raised} | x.grad = {None if x.grad is None else x.grad.tolist()}"


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
