"""A leaf's tensor hook changing its gradient's size, dtype or type is refused with other errors.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    out = {}
    for name, hook in [("size", lambda g: torch.ones(3)), ("dtype", lambda g: g.double()),
                       ("type", lambda g: 3)]:
        x = torch.ones(2, requires_grad=True)
        x.register_hook(hook)
        try:
            x.sum().backward()
            out[name] = "accepted"
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:90]}"
    return out


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
