"""Choosing and showing: read stored records, pick, front, noise, report, export, limits, the pre-screen."""
