"""``/api/v1/mig/``: the MIG catalogue and the layout check, for any signed-in user."""
