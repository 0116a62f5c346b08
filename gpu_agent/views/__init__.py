"""The fleet pages (platform admins): ``fleet`` (nodes, GPUs, a GPU's layout and its form),
``plan`` (the MIG planner), ``probe`` (a GPU's isolation probes); ``common`` and ``drawing``
are what they share (access, wording, slice drawings)."""
