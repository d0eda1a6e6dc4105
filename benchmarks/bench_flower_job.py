"""Wall time of the Flower federation test's job on the local engines (inprocess, processes, Ray).

The job of ``tests/test_flower_federation.py``: 3 sites x 50 rows (``make_logistic(150, 3)``),
ring(3), PP, 3 rounds, sites loaded from ``.npz`` files.  The Flower figure comes from that test
(``pytest -m slow -s tests/test_flower_federation.py`` prints it); this script gives the Ray figure
(which needs the ``ray`` extra) next to inprocess and processes, measured in one process.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 python benchmarks/bench_flower_job.py
"""

from __future__ import annotations

import tempfile
import time

import numpy as np

from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.engines import RayEngine
from dpopt.distributed.sites import Site
from dpopt.distributed.topology import ring, split_rows


def _admm() -> PrivateADMM:
    return PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
                       noise_rate=geometric(5.0, 1.05), max_iter=3)  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        ds = make_logistic(150, 3, rng=0)
        sites = []
        for k, rows in enumerate(split_rows(150, 3, rng=0)):
            np.savez(f"{d}/site{k}.npz", X=ds.X[rows], y=ds.y[rows])
            sites.append(Site(f"site{k}", loader=f"{d}/site{k}.npz"))
        out = {}
        ref = None
        for name in ("inprocess", "processes"):
            t = time.perf_counter()
            ref = _admm().run(sites, rng=3, engine=name)
            out[f"{name} run"] = time.perf_counter() - t
        t = time.perf_counter()
        eng = RayEngine(3, init_kwargs={"resources": {f"site:site{k}": 1 for k in range(3)}})
        out["ray start-up"] = time.perf_counter() - t
        with eng:
            t = time.perf_counter()
            res = _admm().run(sites, rng=3, engine=eng)
            out["ray run"] = time.perf_counter() - t
        assert ref is not None and np.array_equal(ref.models, res.models)
        for k, v in out.items():
            print(f"{k:>16}: {v:8.3f} s (wall)")


if __name__ == "__main__":
    main()
