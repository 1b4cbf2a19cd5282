"""Two gradients that meet at one input, one of them undefined (what gradcheck's default check_undefined_grad sends for a function with two outputs), make the compiled graph call torch.add with None: a TypeError where eager autograd skips the undefined one.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([1.5, -1.0, 0.25], dtype=torch.float64, requires_grad=True)
    # gradcheck(lambda a, b: (a.exp(), a @ b), (x, w)) passes in eager and fails the same way.
    outs = [torch._C._functions.UndefinedGrad()(x.exp()), x @ w]
    grads = torch.autograd.grad(outs, (x, w), [torch.zeros_like(o) for o in outs],
                                allow_unused=True)
    return [g.tolist() for g in grads]


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
