"""GPU rules shared by the portal and the node agent, free of both (and of Django).

- ``gpu_spec.mig``: the MIG catalogue, layout rules, planner and mig-parted configs.
"""
