"""Contract suite for every engine in ``dpopt.distributed.engines.ENGINES`` (issue 11 §5).

Same seed, same bits: a private ADMM run on every registered engine returns exactly the models, the
per-node privacy history and the recorded iterates of the in-process engine.  A new engine name in
``ENGINES`` is covered without editing this file (engines whose optional dependency is missing are
skipped, saying which).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.datasets import make_logistic
from dpopt.distributed.admm import ADMMResult, PrivateADMM, geometric
from dpopt.distributed.engines import ENGINES, make_engine, ray_available
from dpopt.distributed.topology import erdos_renyi, split_rows

N_NODES = 4


@pytest.fixture(scope="module")
def run_on():
    ds = make_logistic(160, 3, rng=0)
    parts = split_rows(160, N_NODES, how="even", rng=1)
    data = [(ds.X[p], ds.y[p]) for p in parts]
    alg = PrivateADMM(
        erdos_renyi(N_NODES, 0.7, rng=5), method="pp", penalty=geometric(0.5, 1.05),
        noise_rate=geometric(3.0, 1.01), max_iter=4, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip

    def run(engine: str) -> ADMMResult:
        opts = {"n_shards": 2} if engine == "inprocess" else {"n_workers": 2} if engine == "processes" else {}
        with make_engine(engine, **opts) as eng:
            return alg.run(data, rng=7, engine=eng, record_models=True)

    return run


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_bit_identical_with_inprocess(engine: str, run_on) -> None:
    if engine == "ray" and not ray_available():
        pytest.skip("ray is not installed (pip install 'dpopt[ray]')")
    ref = run_on("inprocess")
    res = run_on(engine)
    assert np.array_equal(ref.models, res.models)
    assert np.array_equal(ref.node_privacy_history, res.node_privacy_history)
    assert ref.models_history is not None and res.models_history is not None
    assert np.array_equal(ref.models_history, res.models_history)
    assert ref.privacy.epsilon == res.privacy.epsilon


class _Crash(Exception):
    pass


@pytest.mark.parametrize(
    "engine", [pytest.param(e, marks=pytest.mark.slow) if e == "ray" else e for e in ENGINES]
)
def test_engine_resumes_a_crashed_run_directory(engine: str, run_on, tmp_path) -> None:
    """A run crashed in-process after round 3 resumes on every engine: same released rounds, no new charge."""
    if engine == "ray" and not ray_available():
        pytest.skip("ray is not installed (pip install 'dpopt[ray]')")
    from dpopt.accounting import BasicAccountant

    ref = run_on("inprocess")
    ds = make_logistic(160, 3, rng=0)
    data = [(ds.X[p], ds.y[p]) for p in split_rows(160, N_NODES, how="even", rng=1)]
    alg = PrivateADMM(
        erdos_renyi(N_NODES, 0.7, rng=5), method="pp", penalty=geometric(0.5, 1.05),
        noise_rate=geometric(3.0, 1.01), max_iter=4, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip

    def crash(info) -> None:
        if info.round == 3:
            raise _Crash

    acc = BasicAccountant(neighbouring="replace_one")
    with pytest.raises(_Crash):
        alg.run(data, rng=7, checkpoint_dir=tmp_path, checkpoint_every=2, callback=crash, accountant=acc)
    opts = {"n_shards": 2} if engine == "inprocess" else {"n_workers": 2} if engine == "processes" else {}
    with make_engine(engine, **opts) as eng:
        res = alg.run(
            data,
            rng=None,
            engine=eng,
            checkpoint_dir=tmp_path,
            resume=True,
            record_models=True,
            accountant=acc,
        )
    assert res.models_history is not None and ref.models_history is not None
    assert np.array_equal(ref.models_history, res.models_history)
    assert len(acc.ledger) == 1
