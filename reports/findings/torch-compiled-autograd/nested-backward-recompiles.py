"""A backward run from inside a custom Function's backward (a reentrant backward), nested 200 deep: every level compiles a new graph, so the whole takes seconds where eager takes milliseconds. The results agree.

Dynamo guards on the exact value of an int it reads (here ctx.scale, the remaining depth), so
no level reuses another's graph. Standalone: plain PyTorch, no conformance import. Runs the same
program with eager autograd and with compiled autograd (torch._dynamo.compiled_autograd, the
graph compiled by torch.compile with the "eager" backend) in one process and prints both
results and their times.
"""
import time

import torch
from torch._dynamo import compiled_autograd


class Nest(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, depth):
        ctx.scale = depth
        return x * 3

    @staticmethod
    def backward(ctx, g):
        if ctx.scale > 0:
            with torch.enable_grad():
                leaf = torch.ones(1, requires_grad=True)
                Nest.apply(leaf, ctx.scale - 1).sum().backward()
        return g * 3, None


def program(depth=200):
    x = torch.ones(1, requires_grad=True)
    Nest.apply(x, depth).sum().backward()
    return x.grad.tolist()


def timed(fn):
    start = time.perf_counter()
    try:
        result = repr(fn())
    except Exception as exc:  # the error is the result
        result = f"raises {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return f"{result} in {time.perf_counter() - start:.2f} s"


def compiled():
    torch._dynamo.reset()  # a cold compiled-autograd cache
    with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager", fullgraph=False)):
        return program()


print("torch", torch.__version__)
print("eager:   ", timed(program))
print("compiled:", timed(compiled))
