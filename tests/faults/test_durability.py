"""The Redis that `docker compose up` and `make run` start keeps its data across a restart: AOF,
fsynced every second (what tests/faults/test_redis_restart.py runs against)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_redis_has_aof_in_a_volume() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    redis = compose["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--appendfsync everysec" in command
    assert "--maxmemory-policy noeviction" in command
    volume = next(v for v in redis["volumes"] if v.endswith(":/data"))  # the image's folder
    assert volume.split(":")[0] in compose["volumes"]


def test_services_sh_starts_redis_with_aof() -> None:
    script = (ROOT / "deploy" / "services.sh").read_text()
    start = re.search(r"redis-server (?:- )?--daemonize yes(?:[^\n]*\\\n)*[^\n]*", script)
    assert start is not None
    assert "--appendonly yes --appendfsync everysec" in start[0]
    assert "--dir /var/lib/redis" in start[0]
