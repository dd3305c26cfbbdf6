"""agent_svc: Runs agent rollouts and serves POST /v1/optimize."""
