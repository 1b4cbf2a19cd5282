"""retain_grad() on a non-leaf makes Dynamo warn that it cannot trace call_cpp_tensor_pre_hooks.

Standalone: plain PyTorch, no conformance import. Runs the same program with eager autograd and
with compiled autograd (torch._dynamo.compiled_autograd, the graph compiled by torch.compile with
the "eager" backend) in one process and prints both results.
"""
import torch
from torch._dynamo import compiled_autograd


def program():
    import warnings
    t1 = torch.tensor(2.0, requires_grad=True)
    t2 = t1 * 3
    t2.retain_grad()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t2.backward()
    return [str(w.message)[:100] for w in caught]


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
