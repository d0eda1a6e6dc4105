"""Google's ``dp-accounting`` (and scipy's root finder), imported on first use.

Importing them costs about a second of CPU; ``import dpopt.accounting`` (and the light commands
``dpopt --help``, ``dpopt ledger show``) need neither until a tight accountant or a calibration runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpopt._lazy import LazyModule

if TYPE_CHECKING:
    import dp_accounting
    from dp_accounting import rdp
    from dp_accounting.pld import common as pld_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from scipy import optimize
else:
    dp_accounting = LazyModule("dp_accounting")
    rdp = LazyModule("dp_accounting.rdp")
    pld_common = LazyModule("dp_accounting.pld.common")
    pld_lib = LazyModule("dp_accounting.pld.privacy_loss_distribution")
    optimize = LazyModule("scipy.optimize")

__all__ = ["dp_accounting", "optimize", "pld_common", "pld_lib", "rdp"]
