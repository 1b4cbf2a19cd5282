"""An out-of-bounds advanced index is not checked on the CPU: it reads memory past the tensor.

paddle.rand([3])[paddle.to_tensor([5])] returns whatever lies past the buffer (a different
value each run); an index of 10**8 segfaults. PyTorch raises IndexError.

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
x = paddle.rand([3])
value = x[paddle.to_tensor([5])].numpy().tolist()  # whatever lies past the buffer
print("x[[5]] returns a value instead of raising (it differs from run to run)", flush=True)
print("x[[10**8]] =", x[paddle.to_tensor([100000000])].numpy().tolist())"""

TORCH = """
import torch
x = torch.rand(3)
try:
    x[torch.tensor([5])]
except IndexError as exc:
    print("raises IndexError:", str(exc).splitlines()[0])"""

RECORDED = 'raises IndexError: index 5 is out of bounds for dimension 0 with size 3'
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
