"""Launching: run a config somewhere (partitions of this host or a Ray cluster), one run per study, nothing left behind."""
