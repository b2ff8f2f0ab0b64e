"""The user program of tests/test_persist_processes.py: the writer and the readers import copies of it from
different directories (as on another machine); scenarios edit a reader's copy."""

import torch
import torch.nn as nn

SCALE = 2.0


def helper(x):
    return x * 3.0


def f(x, n):
    return helper(torch.relu(x)) * n + 1


def k(x):
    return x * SCALE - 1


def make_closure(c):
    def scaled(x):
        return torch.sin(x) * c

    return scaled


closure_fn = make_closure(3.0)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()
        self.out = nn.Linear(8, 3)
        self.scale = 0.5

    def forward(self, x):
        return self.out(self.mlp(x)) * self.scale


def make_net():
    torch.manual_seed(0)
    return Net()


class Counter(nn.Module):
    """State that `forward` assigns: a step counter, a cached value (a new attribute), a buffer's running sum."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.steps = 0
        self.gain = 1.0
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.steps += 1
        self.last = x.sum()
        self.running = self.running * 0.5 + x.sum(0)
        return self.lin(x) * self.steps * self.gain


def make_counter():
    torch.manual_seed(0)
    return Counter()


TABLE = {"w": torch.full((4,), 2.0)}


class Holder:
    pass


HOLDER = Holder()
HOLDER.w = torch.full((4,), 3.0)


def from_table(x):
    return x * TABLE["w"]


def from_holder(x):
    return x + HOLDER.w


def make_listed(c):
    box = [torch.arange(4.0) * c]

    def listed(x):
        return x - box[0]

    return listed


listed_fn = make_listed(1.0)
box = listed_fn.__closure__[0].cell_contents


LIMITS = [1, 2]


def count_of(x, lst):
    return x * len(lst) * LIMITS[0]


def as_module(fn):
    """A function replaced by an instance of a module class made here (as the `kernels` package does for
    transformers' `apply_rotary_pos_emb`): the class has no importable name, its forward closes over `fn`."""

    class Func(nn.Module):
        def forward(self, *args):
            return fn(*args)

    return Func()


@as_module
def rotate(x):
    return torch.cat([-x[..., 1:], x[..., :1]], dim=-1)


class Rotating(nn.Module):
    """Holds the function module in a dict attribute, outside its submodule tree (transformers' `_kernel_funcs`)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self._funcs = {"rotate": rotate}

    def forward(self, x):
        return self._funcs["rotate"](self.fc(x))


def make_rotating():
    torch.manual_seed(0)
    return Rotating()
