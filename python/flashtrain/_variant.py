"""_variant.py — argument handling shared by flashtrain.numpy and flashtrain.torch: the window pair,
and (B, N, D) inputs (one head) beside (B, H, N, D) ones."""


def window_bounds(window):
    """(left, right) from None (unbounded) or a pair whose entries are ints, -1 or None (unbounded)."""
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(f"window must be None or a pair (left, right), -1 or None = unbounded: given {window!r}") from None
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


def missing_head_axis(**arrays):
    """True when every array is (B, N, D), False when every one is (B, H, N, D); ValueError otherwise."""
    dims = {name: array.ndim for name, array in arrays.items()}
    if all(d == 3 for d in dims.values()):
        return True
    if all(d == 4 for d in dims.values()):
        return False
    given = ", ".join(f"{name} {d}" for name, d in dims.items())
    raise ValueError(f"attention: inputs must all be (B, N, D) or all (B, H, N, D): given dims {given}")
