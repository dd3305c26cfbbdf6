import sys

from cuda_agent.eval.child.main import main

sys.exit(main(sys.argv))
