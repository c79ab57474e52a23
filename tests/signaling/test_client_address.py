"""The client's address behind trusted reverse proxies (X-Forwarded-For)."""

from __future__ import annotations

from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from kefu.errors import ConfigError
from kefu.mediaserver.config import load_config
from kefu.signaling.client_address import CLIENT_ADDRESS_KEY, ClientAddress, client_ip


def _request(peer: str, *forwarded: str) -> web.Request:
    headers = [("X-Forwarded-For", value) for value in forwarded]
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 40000) if name == "peername" else default
    )
    return make_mocked_request(
        "GET", "/ws", headers=headers, transport=transport, app=web.Application()
    )


PROXIES = ClientAddress(["10.0.0.0/8", "fd00::/8"])


def test_a_trusted_proxy_is_believed_about_the_client() -> None:
    assert PROXIES.of(_request("10.1.2.3", "203.0.113.9")) == "203.0.113.9"
    assert PROXIES.of(_request("fd00::1", "2001:db8::7")) == "2001:db8::7"


def test_the_rightmost_untrusted_hop_is_the_client_not_what_the_client_claimed() -> None:
    # The client wrote "1.1.1.1" itself; the proxies appended what they saw.
    chain = "1.1.1.1, 198.51.100.4, 10.0.0.7"
    assert PROXIES.of(_request("10.1.2.3", chain)) == "198.51.100.4"
    assert PROXIES.of(_request("10.1.2.3", "1.1.1.1", "198.51.100.4")) == "198.51.100.4"


def test_anyone_else_cannot_choose_their_address() -> None:
    assert PROXIES.of(_request("198.51.100.4", "10.9.9.9")) == "198.51.100.4"
    assert ClientAddress().of(_request("10.1.2.3", "203.0.113.9")) == "10.1.2.3"


@pytest.mark.parametrize("chain", ["not-an-ip", "203.0.113.9, bogus", ""])
def test_a_garbled_or_empty_chain_leaves_the_proxy(chain: str) -> None:
    assert PROXIES.of(_request("10.1.2.3", chain)) == "10.1.2.3"


def test_an_app_without_trusted_proxies_uses_the_peer() -> None:
    request = _request("10.1.2.3", "203.0.113.9")
    assert client_ip(request) == "10.1.2.3"
    app = web.Application()
    app[CLIENT_ADDRESS_KEY] = PROXIES
    request = make_mocked_request(
        "GET", "/", headers={"X-Forwarded-For": "203.0.113.9"}, app=app,
        transport=_request("10.1.2.3").transport,
    )  # fmt: skip
    assert client_ip(request) == "203.0.113.9"


def test_trusted_proxies_are_checked_at_start() -> None:
    config = load_config(environ={"KEFU_HTTP_TRUSTED_PROXIES": "10.0.0.0/8,fd00::/8"})
    assert config.http.trusted_proxies == ("10.0.0.0/8", "fd00::/8")
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"KEFU_HTTP_TRUSTED_PROXIES": "ingress"})
    assert caught.value.key == "http.trusted_proxies"
