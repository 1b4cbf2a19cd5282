"""autograd.grad frees the saved tensors of nodes behind its inputs, which it did not run: a later
backward through them fails.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd

def program():
    x = torch.ones(2, requires_grad=True)
    w = torch.tensor([2.0, 3.0], requires_grad=True)
    v = x * w
    g, = torch.autograd.grad(v.sum(), [v])
    v.sum().backward()
    return {"x.grad": x.grad.tolist(), "w.grad": w.grad.tolist()}

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
