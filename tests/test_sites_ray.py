"""Sites on a real multi-node Ray cluster (one machine, two Ray nodes, one per site group; issue 14 §1).

Each site's actor is placed through the custom resource ``site:NAME`` that only the site's Ray node
offers; the loaders refuse the driver's process and any node without the site's resource, so the
test passes only if every site's rows are loaded on its own node.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.engines import EngineError, RayEngine, ray_available
from dpopt.distributed.sites import Site
from dpopt.distributed.topology import ring
from site_loaders import DRIVER_ENV, make_rows

pytestmark = pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'dpopt[ray]')")

SIZES = (40, 55, 47, 60)
DIM = 3


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        pytest.skip("another Ray session is running in this process")
    old = {k: os.environ.get(k) for k in (DRIVER_ENV, "PYTHONPATH")}
    os.environ[DRIVER_ENV] = str(os.getpid())  # the Ray nodes and their workers inherit it
    tests = str(Path(__file__).parent)
    src = str(Path(__file__).parents[1] / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [src, tests, *sys.path[1:3]] + ([old["PYTHONPATH"]] if old["PYTHONPATH"] else [])
    )
    c = Cluster(  # machine 1 (also the head)
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"site:s0": 1, "site:s1": 1}, "include_dashboard": False},
    )
    c.add_node(num_cpus=1, resources={"site:s2": 1, "site:s3": 1})  # machine 2
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class SpyRayEngine(RayEngine):
    received: list[bytes]

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        out = super()._get(refs, what)
        self.received.append(pickle.dumps(out))
        return out


def _sites(groups: tuple[str, ...]) -> list[Site]:
    return [
        Site(
            f"s{i}",
            loader="site_loaders:guarded",
            kwargs={"seed": 10 + i, "n_rows": b, "dim": DIM, "ray_site": f"s{i}"},
            group=g,
        )
        for i, (b, g) in enumerate(zip(SIZES, groups, strict=True))
    ]


def _alg() -> PrivateADMM:
    return PrivateADMM(
        ring(4), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
        max_iter=5, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip


def test_sites_on_a_multinode_ray_cluster(cluster) -> None:
    pairs = [make_rows(10 + i, b, DIM) for i, b in enumerate(SIZES)]
    ref = _alg().run(pairs, rng=7, record_models=True)
    with SpyRayEngine(cpus_per_actor=0.25) as eng:
        eng.received = []
        # two small sites share an actor on their machine; one actor per machine
        res = _alg().run(_sites(("m1", "m1", "m2", "m2")), rng=7, engine=eng, record_models=True)
        blob = b"".join(eng.received)
        for x, y in pairs:
            assert x[0].tobytes() not in blob and x[-1].tobytes() not in blob and y.tobytes() not in blob
        assert res.parameters["n_shards"] == 2
        assert np.array_equal(ref.models_history, res.models_history)  # same seed, same released rounds
        # sites of two machines cannot share an actor: refused at start, naming the resources
        with pytest.raises(EngineError, match="site:s1, site:s2"):
            _alg().run(_sites(("a", "b", "b", "c")), rng=7, engine=eng)


@pytest.mark.slow
def test_one_actor_per_site_on_a_multinode_ray_cluster(cluster) -> None:
    pairs = [make_rows(10 + i, b, DIM) for i, b in enumerate(SIZES)]
    ref = _alg().run(pairs, rng=7, record_models=True)
    with RayEngine(cpus_per_actor=0.25) as eng:
        res = _alg().run(_sites(("", "", "", "")), rng=7, engine=eng, record_models=True)
    assert res.parameters["n_shards"] == 4
    assert np.array_equal(ref.models_history, res.models_history)
