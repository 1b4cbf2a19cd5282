"""paddle.prod's gradient is NaN at an element that is zero, where the product is smooth.

prod([0, 2, 3]) has the gradient [6, 0, 0] (the product of the other elements); Paddle divides
the product by each element and gets [nan, 0, 0] ([nan, nan, 0] for two zeros, where the answer
is [0, 0, 0]). One zero in a batch poisons every later update with NaN.

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
grads = []
for values in ([0.0, 2.0, 3.0], [0.0, 0.0, 3.0]):
    x = paddle.to_tensor(values, stop_gradient=False)
    paddle.prod(x).backward()
    grads.append(x.grad.numpy().tolist())
print(f"one zero: {grads[0]}; two zeros: {grads[1]}")"""

TORCH = """
import torch
grads = []
for values in ([0.0, 2.0, 3.0], [0.0, 0.0, 3.0]):
    x = torch.tensor(values, requires_grad=True)
    torch.prod(x).backward()
    grads.append(x.grad.tolist())
print(f"one zero: {grads[0]}; two zeros: {grads[1]}")"""

RECORDED = 'one zero: [6.0, 0.0, 0.0]; two zeros: [0.0, 0.0, 0.0]'
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
