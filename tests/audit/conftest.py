"""The heavy audit suite reuses the contract suites' helpers and fixtures (tests/contracts)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contracts"))

from contract_helpers import memo_certify, quiet

__all__ = ["memo_certify", "quiet"]
