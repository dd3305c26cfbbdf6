"""Synthesis of training problems: seed crawl (crawl), composition (compose), execution filters (filters,
worker), decontamination and dedup (dedupe), the pipeline (pipeline), files (export) and the database (store)."""
