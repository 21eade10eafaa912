"""The Convert server takes the API's access tokens (JWT) as well as its service token."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest
from pydantic import SecretStr

from shared.auth.tokens import SigningKeys, issue_access_token, signing_keys
from shared.auth.users import User
from shared.convert.client import ConvertClient, PdfFile
from shared.errors import UnavailableError
from shared.settings import Settings
from tests.convert.conftest import StartServer
from tests.convert.pdfs import make_pdf

pytestmark = pytest.mark.anyio

READER = User(1, "reader", "reader", None, False, datetime.now(UTC))


async def test_an_access_token_of_the_api_is_taken(
    convert_settings: Settings, start_server: StartServer
) -> None:
    guarded = convert_settings.model_copy(update={"convert_token": SecretStr("service-t0ken")})
    server = start_server(guarded)
    pdf = PdfFile(data=make_pdf([(200, 200, "one"), (200, 200, "two")]))
    good = issue_access_token(signing_keys(guarded), READER, 60)
    async with ConvertClient(server.address, token=good) as client:
        assert (await client.pdf_merge([pdf])).page_count == 2
    async with ConvertClient(server.address, token="service-t0ken") as client:
        assert (await client.pdf_merge([pdf])).page_count == 2
    other = SigningKeys((("k1", "another secret that is long enough!!"),))
    refused = [
        issue_access_token(other, READER, 60),  # not our key
        issue_access_token(signing_keys(guarded), READER, -10),  # expired
        "not.a.token",
    ]
    for token in refused:
        async with ConvertClient(server.address, token=token) as client:
            with pytest.raises(UnavailableError, match="refused the access token") as caught:
                await client.pdf_merge([pdf])
            assert caught.value.detail["grpc_status"] == grpc.StatusCode.UNAUTHENTICATED.name
    assert server.servicer.stats.calls == 2  # refused calls never ran
