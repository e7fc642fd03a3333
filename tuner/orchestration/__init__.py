"""Orchestration: what runs next (the search loop, the time bound, re-measurement, confirmation, compare, the dry run)."""
