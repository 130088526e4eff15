"""A simulator of the documentation vendor's admin API, for tests, the demo and benchmarks.

It is a real HTTP server: static export jobs (both the global three-step flow and the
project-scoped two-step flow), agent jobs, S3-style presigned downloads with Range support,
and injectable faults. See `Simulator`. `mirror.sim.seaweed` runs the other server they
need, a real S3 one (SeaweedFS) on loopback.
"""

from mirror.sim.config import AGENT_OUTCOMES, MALICIOUS_KINDS, Faults, SimConfig
from mirror.sim.server import Simulator
from mirror.sim.stats import SimStats

__all__ = ["AGENT_OUTCOMES", "MALICIOUS_KINDS", "Faults", "SimConfig", "SimStats", "Simulator"]
