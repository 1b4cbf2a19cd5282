"""A leaf set not to require grad after the graph was built: its post-accumulate-grad hook does not run.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    x = torch.ones(2, requires_grad=True)
    y = x.neg()
    calls = []
    x.register_post_accumulate_grad_hook(lambda p: calls.append("post-accumulate hook"))
    x.register_hook(lambda g: calls.append("tensor hook"))
    x.requires_grad_(False)
    y.sum().backward()
    return calls


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
