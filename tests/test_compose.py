"""compose.yaml: the services it runs, and settings the service knows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shared.settings import Settings, env_values

COMPOSE = Path(__file__).resolve().parents[1] / "compose.yaml"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def test_the_front_takes_the_port_and_passes_to_the_api() -> None:
    services = _services()
    front, api = services["front"], services["api"]
    assert front["command"] == ["front"]
    assert front["ports"] == ["8000:8000"]
    assert "ports" not in api  # reached through the front only
    assert front["environment"]["MAPSVC_FRONT_BACKEND"] == "api:8000"
    assert api["environment"]["FORWARDED_ALLOW_IPS"] == "*"  # the front's X-Forwarded-For
    # both see the same public layers and the same tile cache
    assert (
        front["environment"]["MAPSVC_PUBLIC_LAYERS"] == api["environment"]["MAPSVC_PUBLIC_LAYERS"]
    )
    assert front["volumes"] == api["volumes"] == ["work:/data"]


def test_every_mapsvc_variable_is_a_setting() -> None:
    known = set(env_values(Settings(_env_file=None)))  # type: ignore[call-arg]
    for name, service in _services().items():
        for variable in service.get("environment", {}):
            if variable.startswith("MAPSVC_"):
                assert variable in known, (name, variable)


def test_rasters_and_tiles_are_in_object_storage_and_workers_scale() -> None:
    services = _services()
    buckets = services["buckets"]["command"][0]
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    for name in ("api", "worker", "convert"):
        env = services[name]["environment"]
        assert env["MAPSVC_RASTER_STORE"] == "s3", name
        assert env["MAPSVC_S3_ENDPOINT_URL"] == "http://minio:9000", name
        # the buckets the service reads are the ones the `buckets` service makes
        for bucket in (env["MAPSVC_RASTER_S3_BUCKET"], env["MAPSVC_S3_BUCKET"]):
            assert f"local/{bucket}" in buckets, bucket
        assert services[name]["depends_on"]["buckets"] == {
            "condition": "service_completed_successfully"
        }
    assert services["worker"]["environment"]["MAPSVC_RASTER_S3_BUCKET"] == (
        settings.raster.s3_bucket
    )
    assert services["worker"]["deploy"]["replicas"] >= 2
    # the S3 keys are MinIO's root credentials, from one pair of variables
    minio = services["minio"]["environment"]
    env = services["api"]["environment"]
    assert env["MAPSVC_S3_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
    assert env["MAPSVC_S3_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
