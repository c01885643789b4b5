"""Step values from a training script, made plain numbers for the wire.

Scripts hand over what they have: Python numbers, numpy scalars (`np.int64(64)`), 0-d or
one-element arrays and tensors (`torch.tensor(1000)`, a loss or a learning rate on the GPU).
JSON carries only the first, and the hub refuses a step with anything else in a number field,
so each value is coerced here, on the training thread and cheaply: Python numbers as they are,
numpy by `.item()`, CPU tensors by `.tolist()` (no GIL release), CUDA tensors copied asynchronously and read once computed
(LazyScalar: no synchronisation now). A value that is no number (a string, a list, a tensor of
several elements) raises NotANumber; the agent leaves that field out and warns once.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

from gpumix.agent.lazy import LazyScalar, PinnedPool

Coerced = int | float | LazyScalar | None


class NotANumber(TypeError):
    """str() names what the value was, e.g. 'str' or 'a tensor of 8 elements'."""


def coerce(value: Any, pinned: PinnedPool | None, average: bool = False) -> Coerced:
    """A plain int or float, a LazyScalar for a CUDA tensor, or None; NotANumber otherwise.

    average: a tensor of several elements gives its mean (a per-sample loss) instead of NotANumber.
    """
    kind = type(value)
    if value is None or kind is int or kind is float:  # the common case first: nothing to do
        return value
    if isinstance(value, bool) or isinstance(value, complex):
        raise NotANumber(kind.__name__)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _tensor(value, torch, pinned, average)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray | numpy.generic):
        if value.size != 1:
            raise NotANumber(f"an array of {value.size} elements")
        return _plain(value.item(), kind.__name__)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):  # Fraction, numpy's registered scalars
        return float(value)
    raise NotANumber(kind.__name__)


def _tensor(value: Any, torch: Any, pinned: PinnedPool | None, average: bool) -> Coerced:
    dtype = value.dtype  # its attributes, not is_complex(): an operator call releases the GIL, and a
    if dtype == torch.bool or dtype.is_complex:  # thread waiting for it (the sender) then holds it
        raise NotANumber(f"a {dtype} tensor")
    elements = value.numel()
    if elements != 1 and not average:
        raise NotANumber(f"a tensor of {elements} elements")
    if value.is_cuda and pinned is not None:  # is_cuda: device.type builds a torch.device each call
        return LazyScalar(value, pinned)  # read once computed: .item() now would wait for the GPU
    if elements != 1:
        return float(value.detach().float().mean())
    # tolist(), not item() or float(): on a CPU tensor it reads the number without releasing the GIL;
    # those release it, and a thread waiting for it (the sender) then holds it while this step waits
    item = value.tolist()
    while type(item) is list:  # a one-element tensor of any shape
        item = item[0]
    return _plain(item, "tensor")


def _plain(item: Any, what: str) -> int | float:
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise NotANumber(f"{what} holding {type(item).__name__}")
    return item


def read(value: Coerced, wait: bool = False) -> int | float | None:
    """The number now (a LazyScalar whose copy has not finished yet reads None, unless wait)."""
    return value.read(wait) if isinstance(value, LazyScalar) else value


def on_gpu(value: Any) -> bool:
    """A CUDA tensor: reading it now would wait for the GPU, copying it costs a launch (cheap to ask)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and value.is_cuda


class Setting:
    """A number set once on the agent, not per step (micro_batch, ...): coerced on assignment, a CUDA
    tensor read now, a value that is no number None (owner._setting warns once)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, owner: Any, kind: type | None = None) -> Any:
        return self if owner is None else owner.__dict__.get(self.name)

    def __set__(self, owner: Any, value: Any) -> None:
        owner.__dict__[self.name] = owner._setting(self.name, value)
