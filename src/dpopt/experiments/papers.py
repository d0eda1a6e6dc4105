"""The papers that dpopt's reproductions come from, as a reader would cite them (``seed_doc``)."""

from __future__ import annotations

__all__ = ["ADMM", "COA", "KURU", "TTZ"]

#: Linear-query release: the COA method and its baselines.
COA = (
    "Yuan, Yang, Zhang & Hao, Convex optimization for linear query processing under approximate DP (KDD 2016)"
)
#: Private ERM over constraint sets: Noise-MD, objective perturbation, Noise-FW.
TTZ = "Talwar, Thakurta & Zhang, Private ERM beyond the worst case: the effect of the constraint set geometry (2014)"
#: Private accelerated gradient methods (chapter 4) and HAMSI matrix factorization (chapter 3).
KURU = (
    "Kuru, Novel gradient-based methods for data distribution and privacy in data science (PhD thesis, 2019)"
)
#: Private distributed ADMM: penalty and dual-variable perturbation.
ADMM = "Zhang, Khalili & Liu, Improving the privacy and accuracy of ADMM-based distributed algorithms (ICML 2018)"
