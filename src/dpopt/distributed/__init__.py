"""Distributed optimization: topologies, partitioners, engines and private ADMM."""
