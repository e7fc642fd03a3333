"""Launching: run a config somewhere (a partition of this host or of a Ray cluster), with the same
hygiene every time, and leave nothing behind."""
