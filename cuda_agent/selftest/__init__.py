"""`cuda-agent selftest`: a reliability and security suite against the real services.

It starts a private stack on loopback (Postgres database, Redis, the five APIs, one Celery worker per queue),
runs the chosen parts against it and prints one table, tried / held / failed per part:

- ``sandbox``: attacks as candidate code at build and run time and as agent tool calls (attacks.py);
- ``hacks``: the reward-hack suite through ``POST /v1/evaluate``;
- ``faults``: workers, Redis, Postgres connections and an API killed mid-job: nothing lost, nothing twice;
- ``badinput``: schemathesis over every route of every service: no 5xx;
- ``tenancy``: every route without a key and with another tenant's objects;
- ``load`` (on demand): many concurrent submissions, all accepted, none lost, latency percentiles.
"""

from cuda_agent.selftest.report import Check, PartReport, passed, render, to_json
from cuda_agent.selftest.runner import DEFAULT_PARTS, PARTS, UnknownName, run_selftest

__all__ = [
    "DEFAULT_PARTS",
    "PARTS",
    "Check",
    "PartReport",
    "UnknownName",
    "passed",
    "render",
    "run_selftest",
    "to_json",
]
