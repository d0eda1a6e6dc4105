"""SETSCHEDULE: the deterministic (cyclic shift) and stochastic (shuffling) subset orders.

>>> from dpopt.solvers.hamsi import subset_schedule
>>> orders = subset_schedule(3)
>>> next(orders), next(orders)
([0, 1, 2, 0], [1, 2, 0, 1])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from dpopt._validation import check_int
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, as_generator


def subset_schedule(
    n_subsets: int,
    schedule: Literal["det", "stoc"] = "det",
    *,
    repeat_first: bool = True,
    rng: RNGLike = None,
) -> Iterator[list[int]]:
    """SETSCHEDULE: an endless iterator of zero-based subset orders, one per outer iteration.

    ``"det"`` rotates a base permutation left by one every outer iteration, starting from
    ``[K-1, 0, ..., K-2]`` so that the first order is ``[0, 1, ..., K-1]``; ``"stoc"`` draws a fresh
    uniform permutation from ``rng``.  With ``repeat_first`` (HAMSI) the first subset is appended, so
    orders have length ``K + 1`` and first = last; mb-GD uses ``repeat_first=False``.  For ``K = 1``
    the order is ``[0]`` (the repeated visit is the next outer iteration's).

    Example (1-based, K = 5): ``[3,4,5,1,2,3] -> [4,5,1,2,3,4] -> [5,1,2,3,4,5]`` (the thesis prints
    the last as ``[5,1,2,3,4,1]``, a typo).
    """
    K = check_int(n_subsets, "n_subsets")
    if schedule not in ("det", "stoc"):
        raise InvalidParameterError("schedule: must be 'det' (cyclic shift) or 'stoc' (shuffling)")
    gen = as_generator(rng) if schedule == "stoc" else None
    base = [K - 1, *range(K - 1)]
    while True:
        if gen is None:
            base = base[1:] + base[:1]
        else:
            base = [int(v) for v in gen.permutation(K)]
        yield [*base, base[0]] if repeat_first and K > 1 else list(base)
