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
