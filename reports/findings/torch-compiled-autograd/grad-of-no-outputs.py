"""autograd.grad with no outputs (what gradcheck does for a function none of whose outputs requires grad) raises IndexError in compiled autograd's capture; eager returns None for every input.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    # gradcheck(lambda a: (a > 5).double(), (x,)) is True in eager and fails the same way.
    return torch.autograd.grad([], (x,), [], allow_unused=True)


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
