"""``python -m gpu_agent``: the GPU node agent (``gpu_agent/agent/runner.py``; no Django)."""

import sys

from gpu_agent.agent.runner import main

if __name__ == "__main__":
    sys.exit(main())
