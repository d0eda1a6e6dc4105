"""Site loaders for the tests of dpopt.distributed.sites (imported by worker processes and Ray actors).

``guarded`` refuses to run in the driver's process (its pid is in ``DPOPT_TEST_DRIVER_PID``), so a
test passes only if every site's rows are loaded inside a worker.
"""

from __future__ import annotations

import os

import numpy as np

DRIVER_ENV = "DPOPT_TEST_DRIVER_PID"


def make_rows(seed: int, n_rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A site's rows: ‖x‖ <= 1, labels ±1 from a noisy linear rule."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((n_rows, dim))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))
    w = np.linspace(-1.0, 1.0, dim)
    y = np.where(x @ w + 0.3 * g.standard_normal(n_rows) > 0, 1.0, -1.0)
    return x, y


def guarded(seed: int, n_rows: int, dim: int, ray_site: str = "") -> tuple[np.ndarray, np.ndarray]:
    """``make_rows`` that refuses the driver's process (and, on Ray, a node without the site's resource)."""
    if str(os.getpid()) == os.environ.get(DRIVER_ENV):
        raise RuntimeError("a site loader ran in the driver's process")
    if ray_site:
        import ray

        assigned = ray.get_runtime_context().get_assigned_resources()
        if f"site:{ray_site}" not in assigned:
            raise RuntimeError(f"site {ray_site} loaded on a worker without its resource")
    return make_rows(seed, n_rows, dim)
