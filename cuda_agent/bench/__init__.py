"""Benchmarks of the evaluation harness at the sizes users bring (issue 12): ``cuda-agent bench eval``.

``cases`` finds problems with their candidates and sizes them on the meta device, ``floor`` measures the
in-process loop a harness could reach, ``monitor`` samples memory and disk writes, and ``eval_bench`` runs the
verdicts beside them and prints the table. ``optimize_bench`` is the CI gate of the optimize job (issue 14):
``cuda-agent bench optimize`` on a folder of problems, a table, a summary and a speedup threshold. Nothing is
imported here: the floor's own process (``python -m cuda_agent.bench.floor``) should not pay for the evaluation
harness it is measured against.
"""
