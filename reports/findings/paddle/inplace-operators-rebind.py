"""`w -= lr * w.grad` on a Paddle parameter makes a new tensor: the parameter is never updated.

paddle.Tensor defines no __isub__ (nor __iadd__, __imul__, __itruediv__), so Python falls back to
`w = w - lr * w.grad`: the name w now holds a new tensor that does not require a gradient
(stop_gradient=True), and the parameter itself keeps its old value. A training loop written the
PyTorch way, under no_grad, silently stops training.

Standalone: plain Paddle, and PyTorch for the expected side when it is installed; no import of
the conformance project. Each side runs in its own process, so a crash or a hang is reported
(with the last line it wrote to stderr) instead of taking this script down.
"""
import importlib.metadata
import platform
import subprocess
import sys

PADDLE = """
import warnings
warnings.simplefilter("ignore")
import paddle
w = paddle.create_parameter([2], "float32")
w.set_value(paddle.to_tensor([1.0, 2.0]))
param = w
(w * w).sum().backward()
with paddle.no_grad():
    w -= 0.1 * w.grad
print(f"same object: {w is param}; parameter: {param.numpy().tolist()}; "
      f"name w requires grad: {not w.stop_gradient}")"""

TORCH = """
import torch
w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
param = w
(w * w).sum().backward()
with torch.no_grad():
    w -= 0.1 * w.grad
print(f"same object: {w is param}; parameter: {[round(v, 4) for v in param.tolist()]}; "
      f"name w requires grad: {w.requires_grad}")"""

RECORDED = 'same object: True; parameter: [0.8, 1.6]; name w requires grad: True'
"""What PyTorch 2.13.0 prints for TORCH, shown when torch is not installed here."""


def outcome(program, timeout=60):
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return (f"the process hung and was killed after {timeout} s"
                + (f" (stderr: {err[-1]})" if err else ""))
    err = [line for line in done.stderr.strip().splitlines() if line.strip()]
    # What the program printed before dying, without the C++ traceback Paddle adds to stdout.
    said = "; ".join(done.stdout.strip().split("\n\n")[0].splitlines())
    said = f"{said}; then " if said else ""
    if done.returncode < 0:
        return f"{said}the process died with signal {-done.returncode}"
    if done.returncode:
        fatal = [line for line in err if "SIGSEGV" in line or "Error" in line]
        return (f"{said}exit status {done.returncode}: "
                f"{(fatal or err or ['(no message)'])[-1].strip()}")
    return done.stdout.strip()


def expected():
    try:
        import torch  # noqa: F401
    except ImportError:
        return RECORDED + " (PyTorch 2.13.0, recorded: torch is not installed here)"
    return outcome(TORCH)


print(f"paddlepaddle {importlib.metadata.version('paddlepaddle')}, "
      f"Python {platform.python_version()}, {platform.platform()}, device CPU")
print("expected:", expected())
print("actual:  ", outcome(PADDLE))
