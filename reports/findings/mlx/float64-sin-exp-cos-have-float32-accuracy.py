"""mx.sin, mx.cos and mx.exp compute float64 arrays with float32 accuracy on the CPU.

The result has dtype float64 but a relative error of ~1e-7 (float32's), so a float64 finite
difference (torch.autograd.gradcheck's eps 1e-6) is off by ~10% of the derivative. mx.tan,
mx.log and mx.sqrt are exact to float64.

Standalone: plain MLX, and PyTorch for the expected side when it is installed; no import of
the conformance project. Each side runs in its own process, so a crash is reported rather than
suffered.
"""
import importlib.metadata
import platform
import subprocess
import sys

PACKAGE = "mlx"

ENGINE = """
import math
import mlx.core as mx
xs = [0.3, 1.2, -0.7]
a = mx.array(xs, dtype=mx.float64)
worst = {}
for name, fn, ref in (("sin", mx.sin, math.sin), ("cos", mx.cos, math.cos),
                      ("exp", mx.exp, math.exp), ("log", None, None)):
    if fn is None:
        continue
    out = fn(a).tolist()
    worst[name] = max(abs(o - ref(x)) / abs(ref(x)) for o, x in zip(out, xs))
print("max relative error, float64: " + ", ".join(
    f"{k} {'<1e-15' if v < 1e-15 else f'{v:.0e}'}" for k, v in worst.items()))"""

TORCH = """
import math
import torch
xs = [0.3, 1.2, -0.7]
a = torch.tensor(xs, dtype=torch.float64)
worst = {}
for name, fn, ref in (("sin", torch.sin, math.sin), ("cos", torch.cos, math.cos),
                      ("exp", torch.exp, math.exp)):
    out = fn(a).tolist()
    worst[name] = max(abs(o - ref(x)) / abs(ref(x)) for o, x in zip(out, xs))
print("max relative error, float64: " + ", ".join(
    f"{k} {'<1e-15' if v < 1e-15 else f'{v:.0e}'}" for k, v in worst.items()))"""

RECORDED = 'max relative error, float64: sin <1e-15, cos <1e-15, exp <1e-15'
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
