"""Finding the Convert client through its setting, and its errors when the server is away."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.convert.client import ConvertClient, PdfFile, convert_client
from shared.errors import UnavailableError
from shared.settings import Settings
from tests.conftest import free_port


def _settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


def test_no_address_no_client() -> None:
    settings = _settings(convert_server_address=None)
    assert settings.convert.server_address is None
    assert convert_client(settings) is None
    assert convert_client(_settings(convert_server_address="  ")) is None


@pytest.mark.anyio
async def test_the_address_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAPSVC_CONVERT_SERVER_ADDRESS", "10.1.2.3:4003")
    monkeypatch.setenv("MAPSVC_CONVERT_TOKEN", "s3cr3t-value")
    settings = _settings()
    assert settings.convert.server_address == "10.1.2.3:4003"
    assert settings.convert.token is not None
    assert settings.convert.token.get_secret_value() == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(settings)

    client = convert_client(settings)
    assert isinstance(client, ConvertClient)
    assert client.address == "10.1.2.3:4003"
    await client.close()


@pytest.mark.parametrize("address", ["4003", "host:", ":4003", "host:port", "h:70000"])
def test_an_address_is_ip_and_port(address: str) -> None:
    with pytest.raises(ValidationError, match="expected <ip>:<port>"):
        _settings(convert_server_address=address)


@pytest.mark.anyio
async def test_a_server_that_is_down_is_unavailable() -> None:
    async with ConvertClient(f"127.0.0.1:{free_port()}", timeout_s=5) as client:
        with pytest.raises(UnavailableError, match="convert service unreachable") as caught:
            await client.pdf_merge([PdfFile(data=b"%PDF-1.7")])
    assert caught.value.detail["grpc_status"] == "UNAVAILABLE"


def test_a_file_has_data_or_a_path() -> None:
    with pytest.raises(ValueError, match="either data or a path"):
        PdfFile("x").to_proto()
    with pytest.raises(ValueError, match="either data or a path"):
        PdfFile("x", data=b"", path="x.pdf").to_proto()
