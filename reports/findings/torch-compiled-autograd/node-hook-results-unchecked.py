"""What a node hook returns is not checked: a post-hook returning the wrong number of values is accepted.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    x = torch.ones(2, requires_grad=True)
    y = torch.ones(2, requires_grad=True)
    z = x * y
    z.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0],))  # 2 expected
    z.sum().backward()
    return {"x.grad": x.grad.tolist(), "y.grad": None if y.grad is None else y.grad.tolist()}


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
