"""``gpu-node-agent``: the GPU node agent (``node_agent/src/gpu_node_agent/runner.py``; no Django)."""

import sys

from gpu_node_agent.runner import main

if __name__ == "__main__":
    sys.exit(main())
