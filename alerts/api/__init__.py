"""The alerts API: list and read alerts (scoped), acknowledge, undo a suspension."""
