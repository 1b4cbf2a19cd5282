"""Node pre-hooks receive a list of gradients where eager autograd passes a tuple.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    seen = []
    a = torch.ones(3, requires_grad=True)
    b = a * 2

    def prehook(grad_outputs):
        seen.append(type(grad_outputs).__name__)

    b.grad_fn.register_prehook(prehook)
    b.sum().backward()
    return seen


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
