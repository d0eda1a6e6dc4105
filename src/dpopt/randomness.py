"""One helper for randomness: turn an ``rng`` argument into a generator; spawn keyed child streams.

``rng`` may be

* an ``int`` seed or a :class:`numpy.random.SeedSequence` (reproducible),
* a :class:`numpy.random.Generator` (used as is),
* ``None``: fresh entropy from the operating system (never a fixed default seed),
* ``"secure"``: a :class:`SecureRNG` that draws from the OS CSPRNG (``secrets``) and makes the
  noise samplers of :mod:`dpopt.mechanisms` use exact discrete samplers.

dpopt never touches numpy's global random state.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from typing import Literal, TypeAlias

import numpy as np

from dpopt.exceptions import InvalidParameterError

__all__ = ["RNGLike", "SecureRNG", "check_rng", "is_secure", "spawn"]


class SecureRNG:
    """Marker generator for hardened sampling.

    Wraps a numpy ``Generator`` whose bit generator is re-seeded from the OS CSPRNG for every
    child; the noise samplers in :mod:`dpopt.mechanisms` detect it (:func:`is_secure`) and switch to
    exact discrete samplers driven by :attr:`randbelow` (:func:`secrets.randbelow`); no mechanism
    draws noise or selections from :attr:`generator` in secure mode, and mechanisms without an
    exact sampler refuse it. Non-noise randomness (shuffles, subsampling
    indices) drawn through :attr:`generator` is seeded from OS entropy and never logged.
    """

    def __init__(self, randbelow: Callable[[int], int] | None = None) -> None:
        self.generator = np.random.default_rng(secrets.randbits(128))
        #: Uniform integers for the exact samplers (:class:`dpopt._discrete.ExactSampler`).
        #: Default :func:`secrets.randbelow`; tests may inject ``random.Random(seed).randrange``
        #: for reproducibility, which is *not* secure.
        self.randbelow: Callable[[int], int] = secrets.randbelow if randbelow is None else randbelow

    def __repr__(self) -> str:
        return "SecureRNG()"


#: What an ``rng`` argument accepts (see the module docstring).
RNGLike: TypeAlias = (
    int | np.integer | np.random.SeedSequence | np.random.Generator | SecureRNG | Literal["secure"] | None
)


def check_rng(rng: RNGLike) -> np.random.Generator | SecureRNG:
    """Return a generator for ``rng`` (see module docstring).

    Raises
    ------
    InvalidParameterError
        If ``rng`` is none of the accepted kinds (e.g. a float or a negative seed).
    """
    if isinstance(rng, SecureRNG | np.random.Generator):
        return rng
    if isinstance(rng, str):
        if rng == "secure":
            return SecureRNG()
        raise InvalidParameterError(
            "rng: the only accepted string is 'secure'; pass an int seed, a numpy Generator or None"
        )
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, bool) or not isinstance(rng, int | np.integer):
        raise InvalidParameterError(
            f"rng: expected an int seed, numpy Generator, 'secure' or None, got {type(rng).__name__}"
        )
    if int(rng) < 0:
        raise InvalidParameterError("rng: an integer seed must be non-negative")
    return np.random.default_rng(int(rng))


def as_generator(rng: RNGLike) -> np.random.Generator:
    """Like :func:`check_rng` but always a numpy ``Generator`` (the secure one's, for non-noise draws)."""
    g = check_rng(rng)
    return g.generator if isinstance(g, SecureRNG) else g


def is_secure(rng: object) -> bool:
    """True if ``rng`` asks for hardened (CSPRNG + exact discrete) noise sampling."""
    return isinstance(rng, SecureRNG) or (isinstance(rng, str) and rng == "secure")


def _key_to_int(key: object) -> int:
    digest = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def spawn(rng: RNGLike, keys: list[object] | tuple[object, ...]) -> list[np.random.Generator | SecureRNG]:
    """Independent child streams, one per key, that depend only on the parent state and the key.

    The same parent seed and the same keys give the same children whatever the order in which the
    children are used, so results do not depend on the engine or on scheduling.  For a secure parent
    every child is a fresh :class:`SecureRNG`.
    """
    g = check_rng(rng)
    if isinstance(g, SecureRNG):
        return [SecureRNG() for _ in keys]
    root = int(g.integers(0, 2**63 - 1))
    return [np.random.default_rng(np.random.SeedSequence([root, _key_to_int(k)])) for k in keys]
