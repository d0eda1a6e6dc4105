"""Fixtures of the contract suites (defined with the shared helpers in ``contract_helpers.py``)."""

from contract_helpers import memo_certify, quiet

__all__ = ["memo_certify", "quiet"]
