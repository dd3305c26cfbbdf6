"""eval_svc: Verifies, times, profiles candidates and computes the reward."""
