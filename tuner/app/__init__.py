"""The application layer, between the command line and the library: *prepare* a run (load a space
and check it against its engine and objective set), *run* a study, *read* a study once per
command. The command line parses, calls one function here and prints; nothing below imports it.
"""
