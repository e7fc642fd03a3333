"""Plain data shared by every layer: metric names, records, evidence, errors, units, credentials, statistics, progress."""
