"""HAMSI: parallel incremental quasi-Newton for partially separable problems (matrix factorization).

Implements chapter 3 of seed 003 (Kuru's thesis, "Hessian Approximated Multiple Subsets Iteration")
as specified in ``spec/distributed-and-private-gradient-methods.md`` §2:

* :func:`hamsi` -- HAMSI with compact L-BFGS (Algorithm H3): deterministic (``schedule="det"``,
  cyclic shift) or stochastic (``"stoc"``, shuffling) subset schedules of length ``K + 1`` whose
  first and last subsets coincide, one curvature pair per outer iteration, the lazy right-to-left
  update ``x <- x - (σ g + W (N (Wᵀ g))) / β_t`` with ``β_t = (η t)^γ``, and gradient-descent
  warm-up until the memory is full.
* :func:`mbgd` -- the mini-batch gradient-descent baseline (same cover, schedule of length ``K``).
* :func:`hamsi_step` and :func:`hamsi_dense` -- the model-minimiser step of Algorithm H1 with an
  explicit Hessian (principal submatrices per block), for small dense partially separable problems.
* :class:`HamsiOptions` -- the options of the three solvers in one frozen, checked object
  (the keyword arguments of each solver are its fields).
* :class:`CompactLBFGS` -- the compact (Byrd-Nocedal-Schnabel) inverse-Hessian representation.
* :func:`hamsi_distributed` -- the same algorithm with STRATA-B on the engines of
  :mod:`dpopt.distributed.engines` (in-process, local processes, Ray: one shard per row block,
  column factors passed DSGD-style, one all-reduce of O(M) scalars per inner step), with the same
  safeguard, recovery of dead or stalled workers from an in-memory checkpoint and durable resume.

Parallelism: the blocks of a subset run on ``n_threads`` threads in compiled kernels that release
the GIL (a thread pool with dynamic scheduling by default, or numba ``prange``).  Variable-disjoint blocks (STRATA, STRATA-B) are processed in one
parallel pass; any other subset (HOGWILD, COLOR bins, a single-subset cover) is laid out on the
problem's fixed ``grid x grid`` stratified layout whose strata run in sequence and whose blocks run
in parallel, race-free.  Layouts and reductions do not depend on the thread count, so with the same
seed and a deterministic schedule the iterates are bit-for-bit identical for every thread count.

Resolutions of the thesis's gaps (spec §2.3-2.7, §7.3): curvature pairs are formed *before* the
update of step ``K+1`` (N2); a pair is accepted when ``sᵀy > τ ||s|| ||y||`` (``curvature="relative"``,
default) or, as in the reference C++ code, ``sᵀy / ||y|| > 1e-6`` (``"reference"``); ``σ`` is the
thesis's ``sᵀy / yᵀy`` of the newest pair or the reference code's running minimum started at 500
(``sigma_mode="running_min"``); ``β_t`` counts inner steps (``beta_counter="inner"``, the reference
code's choice and dpopt's default, because the thesis's outer counter diverges on small covers) or
outer iterations (``"outer"``, thesis).  With a single subset (``K = 1``) the schedule is one step
per outer iteration and a pair is formed between consecutive steps, exactly as the reference code
does with one thread.

dpopt's defaults add two safeguards that neither source has (both can be switched off to run the
reference algorithm exactly): ``β_t >= 1`` (``beta_floor=1``, the assumption of Thm 3.1.3) for the
quasi-Newton steps, and a restart (``safeguard=True``, :mod:`dpopt.solvers.hamsi.safeguard`) that
returns to the last checked point and clears the memory when a subset's loss more than doubles.

HAMSI is an optimizer and is **not** differentially private.
"""

from __future__ import annotations

from dpopt.solvers.hamsi.api import hamsi, mbgd
from dpopt.solvers.hamsi.dense import hamsi_dense, hamsi_step
from dpopt.solvers.hamsi.distributed import hamsi_distributed
from dpopt.solvers.hamsi.lbfgs import CompactLBFGS
from dpopt.solvers.hamsi.options import HamsiOptions
from dpopt.solvers.hamsi.result import HamsiResult
from dpopt.solvers.hamsi.schedule import subset_schedule

__all__ = [
    "CompactLBFGS",
    "HamsiOptions",
    "HamsiResult",
    "hamsi",
    "hamsi_dense",
    "hamsi_distributed",
    "hamsi_step",
    "mbgd",
    "subset_schedule",
]
