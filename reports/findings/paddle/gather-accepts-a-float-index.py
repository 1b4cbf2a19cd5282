"""take_along_axis (and the PyTorch-style Tensor.gather built on it) accepts a float index.

The index is documented as int32 or int64; a float32 index is used as it is, so the result holds
values the tensor does not contain, different from run to run (as if the float's bits were read as
positions, outside the tensor). x.gather(0, paddle.to_tensor([[2.0, 0.0, 1.0, 1.0]])) on a [3, 4] tensor should be
refused; PyTorch raises RuntimeError.

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
x = paddle.to_tensor([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]])
index = paddle.to_tensor([[2.0, 0.0, 1.0, 1.0]])  # float32, rows 2, 0, 1, 1
print("x.gather(0, float index) =", x.gather(0, index).numpy().tolist(), flush=True)
print("take_along_axis(x, float index, 0, broadcast=False) =",
      paddle.take_along_axis(x, index, 0, broadcast=False).numpy().tolist())
print("with an int64 index:", x.gather(0, index.astype("int64")).numpy().tolist())"""

TORCH = """
import torch
x = torch.arange(12.0).reshape(3, 4)
try:
    x.gather(0, torch.tensor([[2.0, 0.0, 1.0, 1.0]]))
except RuntimeError as exc:
    print("raises RuntimeError:", str(exc).splitlines()[0])"""

RECORDED = 'raises RuntimeError: gather(): Expected dtype int32/int64 for index'
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
