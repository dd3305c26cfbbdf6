"""trainer_svc: Trains the policy: RFT, critic pretraining, PPO."""
