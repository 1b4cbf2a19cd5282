"""autograd.grad with a non-leaf input whose hook doubles the gradient, and another input behind it: eager captures before the hook, compiled after.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    v = x * 3
    v.register_hook(lambda g: g * 2)
    gv, gx = torch.autograd.grad(v.sum(), [v, x])
    return {"gv": gv.tolist(), "gx": gx.tolist()}


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
