"""Training the policy: RFT, critic value pretraining and multi-turn PPO on transformers causal LMs.

Needs the optional `train` extra (transformers); it is imported lazily inside this package, so services that only
manage runs (trainer_svc) import `cuda_agent.contracts.train` and never load it. Entry point: `run_stage`, or
`python -m cuda_agent.train STAGE --config FILE --run-dir DIR` (what torchrun launches).
"""
