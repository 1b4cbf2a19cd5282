"""With anomaly mode on, a NaN gradient raises another error, after the whole backward, with no 'Error detected in' warning.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    import warnings
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = x / x
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly():
        warnings.simplefilter("always")
        try:
            y.sum().backward()
            error = None
        except RuntimeError as exc:
            error = str(exc)
    return {"error": error, "warnings": [str(w.message).split(".")[0] for w in caught
                                         if "Anomaly Detection has been enabled" not in str(w.message)]}


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
