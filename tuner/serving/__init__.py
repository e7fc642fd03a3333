"""One trial: start a server, probe it, tear it down."""
