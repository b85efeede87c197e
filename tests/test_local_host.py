"""Local mode (no [auth]) grants LOCAL_ROLES only to a request a browser on this machine made by a loopback
name: a foreign Host (DNS rebinding, a proxy passing its own name) or any Forwarded / X-Forwarded-* header
(a proxy in front of 127.0.0.1) gets no role. The headers here are Streamlit's own StreamlitHeaders, what
st.context.headers returns (the websocket handshake's); the browser tests send them for real."""

from __future__ import annotations

import pytest
from streamlit.runtime.context import StreamlitHeaders

from ui.common import local_request_refusal

BROWSER = [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]


def headers(*pairs: tuple[str, str]) -> StreamlitHeaders:
    return StreamlitHeaders([*BROWSER, *pairs])


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8501",
        "LocalHost:8501",
        "127.0.0.1",
        "127.0.0.1:8501",
        "127.3.4.5:80",
        "[::1]",
        "[::1]:8501",
    ],
)
def test_a_loopback_host_gets_the_local_roles(host):
    assert local_request_refusal(headers(("Host", host))) is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8501",
        "localhost.evil.example:8501",
        "127.0.0.1.evil.example",
        "app.localhost:8501",
        "localhost.:8501",
        "0.0.0.0:8501",
        "192.168.1.10:8501",
        "10.0.0.1",
        "[::ffff:127.0.0.1]:8501",
        "[127.0.0.1]:8501",
        "::1",
        "127.1:8501",
        "127.0.0.256",
        "localhost:port",
        "localhost:8501/x",
        "user@localhost:8501",
        "",
        " localhost",
    ],
)
def test_a_foreign_host_gets_no_role(host):
    assert local_request_refusal(headers(("Host", host))) == "local_mode_foreign_host"


def test_no_host_or_two_hosts_get_no_role():
    assert local_request_refusal(headers()) == "local_mode_foreign_host"
    assert (
        local_request_refusal(headers(("Host", "localhost:8501"), ("Host", "evil.example")))
        == "local_mode_foreign_host"
    )


@pytest.mark.parametrize(
    "name, value",
    [
        ("X-Forwarded-For", "203.0.113.7"),
        ("x-forwarded-host", "dashboard.example"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Port", "443"),
        ("Forwarded", "for=203.0.113.7;host=dashboard.example"),
        ("X-Forwarded-For", ""),
    ],
)
def test_a_forwarded_request_gets_no_role_even_with_a_loopback_host(name, value):
    assert local_request_refusal(headers(("Host", "127.0.0.1:8501"), (name, value))) == "local_mode_forwarded"


def test_without_a_request_there_is_no_browser_to_refuse():
    """AppTest and a bare `python dashboard.py` run have no HTTP request at all, hence no headers; every
    websocket handshake has some (Upgrade, Sec-WebSocket-*, Host), so a browser never lands here."""
    assert local_request_refusal(StreamlitHeaders([])) is None
