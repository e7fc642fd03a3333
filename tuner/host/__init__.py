"""The host: its cores, devices and partitions, its processes (/proc, process groups), the servers a study started, telemetry."""
