"""One emulated replica in its own process, as real vLLM runs in its own (the fidelity test).

    python tests/vllm/emulated_replica.py PROFILE REPLICA_ID OTLP_ENDPOINT '<profile overrides JSON>'

Prints ``READY <url>`` once serving, and serves until its standard input closes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from serving.emulator.live import start_replicas

    profile, replica, otlp, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    fleet = start_replicas(1, profile, ids=[replica], otlp_endpoint=otlp, profile_overrides=overrides or None)
    print(f"READY {fleet[0].url}", flush=True)
    try:
        sys.stdin.read()
    finally:
        fleet.stop()


if __name__ == "__main__":
    main()
