"""A graph compiled with anomaly mode off is reused with it on: the NaN is not detected.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    def run(anomaly):
        x = torch.tensor([0.0, 1.0], requires_grad=True)
        y = x / x  # 0/0: the backward of div gives NaN
        with torch.autograd.set_detect_anomaly(anomaly):
            y.sum().backward()
        return x.grad.tolist()

    first = run(False)  # NaN gradient, no check asked for
    try:
        second = run(True)  # the same graph, anomaly mode on: eager raises
    except RuntimeError as exc:
        second = f"RuntimeError: {exc}"
    return {"anomaly off": first, "anomaly on": second}


def outcome(fn):
    try:
        return repr(fn())
    except Exception as exc:  # the error is the result
        return f"raises {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"


def compiled():
    torch._dynamo.reset()  # a cold compiled-autograd cache
    with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager", fullgraph=False)):
        return program()


print("torch", torch.__version__)
print("eager:   ", outcome(program))
print("compiled:", outcome(compiled))
