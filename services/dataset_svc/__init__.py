"""dataset_svc: Synthesizes and filters training problems."""
