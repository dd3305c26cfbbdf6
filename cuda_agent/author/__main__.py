"""``python -m cuda_agent.author OUT``: the sandboxed author child (search.main)."""

from cuda_agent.author.search import main

main()
