"""paddle.grad with respect to the pieces of split fails with an internal error.

The pieces of paddle.split are outputs of one node; asking for the gradient with respect to
several of them raises "SystemError: (Fatal) Invalid rank for GradTensorHolder::add()". PyTorch
returns each piece's gradient.

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
x = paddle.to_tensor([1.0, 2.0, 3.0, 4.0], stop_gradient=False)
a, b = paddle.split(x, 2)
ga, gb = paddle.grad((a * b).sum(), [a, b])
print("grads:", ga.numpy().tolist(), gb.numpy().tolist())"""

TORCH = """
import torch
x = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
a, b = torch.split(x, 2)
ga, gb = torch.autograd.grad((a * b).sum(), [a, b])
print("grads:", ga.tolist(), gb.tolist())"""

RECORDED = 'grads: [3.0, 4.0] [1.0, 2.0]'
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
