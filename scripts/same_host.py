"""Whether this machine is like the host a stored figure was measured on, before device time goes
into a run that only counts there (docs/goodput.md: a confirmation or a bench of another session's
answer). Standard library only, so the first device call can run it before anything is installed:

    PYTHONPATH=. python3 scripts/same_host.py docs/data/goodput/h100-sglang-2026-12-06e/tune/host.json

Compares the CPU model, the GPUs and driver of the stored devices, and the calibration on the stored
cores (within tuner.host.fingerprint.SPEED_RATIO); host names aside (device machines are all named
alike). Prints both hosts; exit 0 where alike, 1 where not, 2 where the file is unreadable.

A core's loop read in a machine's first minute may be twice what it reads later (docs/goodput.md,
eighth session: 30.4 ms at the first call, 16.6 ms in the tune on the same machine): where only
the loop differs, read it again after the install. The loop does not settle it either: SGLang's own
decode steps in a run's log (scripts/sglang_steps.py) told that machine from the sixth session's
where the loop had not."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuner.host.fingerprint import HostFingerprint, apart, this_host


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stored", type=Path, help="a host.json (a trial's folder, or committed beside its data)")
    parser.add_argument("--devices", default=None, help="GPU indices to name, e.g. 0 (default: as many as stored, from 0)")
    args = parser.parse_args(argv)
    try:
        stored = HostFingerprint.from_dict(json.loads(args.stored.read_text()))
    except (OSError, ValueError) as e:
        print(f"error: {args.stored}: {e}", file=sys.stderr)
        return 2
    if stored is None:
        print(f"error: {args.stored}: not a host fingerprint", file=sys.stderr)
        return 2
    devices = [int(d) for d in args.devices.split(",")] if args.devices else list(range(len(stored.gpus)))
    here = this_host(devices, stored.cores)
    print(f"stored: {stored.describe()}")
    print(f"here:   {here.describe()}")
    differs = apart(stored, here, names=False)
    print("alike" if not differs else "unlike: " + "; ".join(differs))
    return 0 if not differs else 1


if __name__ == "__main__":
    sys.exit(main())
