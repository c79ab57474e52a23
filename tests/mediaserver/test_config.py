import pathlib

import pytest

from kefu.errors import ConfigError
from kefu.mediaserver.config import load_config


def test_defaults_are_valid():
    config = load_config(environ={})
    assert config.calls.media_mode == "ai"
    assert config.sip.listen.port == 5060


def test_toml_then_env_then_overrides(tmp_path):
    path = tmp_path / "kefu.toml"
    path.write_text('[sip]\nlisten = "127.0.0.1:5070"\n[calls]\nmax_concurrent = 7\n')
    config = load_config(
        path,
        environ={"KEFU_CALLS_MAX_CONCURRENT": "9", "KEFU_RTP_PORTS": "30000-30010"},
        overrides={"calls": {"media_mode": "prompt"}},
    )
    assert config.sip.listen.port == 5070
    assert config.calls.max_concurrent == 9
    assert config.rtp.ports == (30000, 30010)
    assert config.calls.media_mode == "prompt"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[sip]\nlisten = "nowhere"\n', "sip.listen"),
        ('[sip]\nlisten = "127.0.0.1:99999"\n', "sip.listen"),
        ("[calls]\nmax_concurrent = -1\n", "calls.max_concurrent"),
        ('[calls]\nmedia_mode = "video"\n', "calls.media_mode"),
        ('[rtp]\nports = "5-4"\n', "rtp.ports"),
        ("[sip]\nbogus = 1\n", "sip.bogus"),
        ('[sip]\nallow_from = ["10.0.0.0/33"]\n', "sip.allow_from"),
        ('[calls]\nrecord_trunks = ["vcc.example"]\n', "calls.record_trunks"),
        ("[webrtc]\nroom_workers = -2\n", "webrtc.room_workers"),
        ('[webrtc]\nroom_workers = "many"\n', "webrtc.room_workers"),
        ("[nosuch]\nx = 1\n", "nosuch"),
        ('[trunk]\noutbound_proxy = "sbc.example.com:5060"\n', "trunk.outbound_proxy"),
        ('[trunk]\noutbound_proxy = "10.0.0.1"\n', "trunk.outbound_proxy"),
        ("[trunk]\nring_timeout = 0\n", "trunk.ring_timeout"),
        ("[trunk]\nmax_redirects = -1\n", "trunk.max_redirects"),
        ('[trunk]\nfrom_user = "a@b"\n', "trunk.from_user"),
        ('[trunk]\npassword = "x"\n', "trunk.username"),
        ('[ai]\navatar = "hologram"\n', "ai.avatar"),
        ('[ai]\navatar_size = "4k"\n', "ai.avatar_size"),
        ("[ai]\navatar_fps = 0\n", "ai.avatar_fps"),
        ("[ai]\navatar_fps = 120\n", "ai.avatar_fps"),
        ("[sip\n", "--config"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, key):
    path = tmp_path / "kefu.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert info.value.key == key
    assert key.split(".")[-1] in str(info.value) or key == "--config"


def test_env_override_is_validated():
    with pytest.raises(ConfigError) as info:
        load_config(environ={"KEFU_HTTP_LISTEN": "1.2.3.4"})
    assert info.value.key == "http.listen"


def test_record_trunks_from_toml_or_the_environment(tmp_path):
    path = tmp_path / "kefu.toml"
    path.write_text('[calls]\nrecord_trunks = ["10.0.0.0/24", "2001:db8::/32"]\n')
    assert load_config(path, environ={}).calls.record_trunks == ("10.0.0.0/24", "2001:db8::/32")
    env = {"KEFU_CALLS_RECORD_TRUNKS": "10.1.0.7, 192.168.0.0/16"}
    assert load_config(environ=env).calls.record_trunks == ("10.1.0.7", "192.168.0.0/16")
    assert load_config(environ={}).calls.record_trunks == ()


def test_trunk_password_comes_from_the_environment(tmp_path):
    path = tmp_path / "kefu.toml"
    path.write_text('[trunk]\noutbound_proxy = "[::1]:5080"\nusername = "kefu"\n')
    config = load_config(path, environ={"KEFU_TRUNK_PASSWORD": "s3cret"})
    assert (config.trunk.username, config.trunk.password) == ("kefu", "s3cret")
    assert config.trunk.outbound_proxy == "[::1]:5080" and config.trunk.ring_timeout == 60.0


def test_tls_settings_are_checked_at_start(tmp_path: pathlib.Path) -> None:
    from loadtest.certs import make_pki

    with pytest.raises(ConfigError) as info:
        load_config(environ={}, overrides={"sip": {"tls_listen": "127.0.0.1:0"}})
    assert info.value.key == "sip.tls_cert"
    with pytest.raises(ConfigError) as info:
        load_config(environ={"KEFU_HTTP_TLS_CERT": "/nonexistent.pem", "KEFU_HTTP_TLS_KEY": "/x"})
    assert "http.tls_cert: no such file" in str(info.value)
    pki = make_pki(tmp_path / "pki")
    sip = {"tls_listen": "127.0.0.1:0", "tls_cert": pki.cert("server"), "tls_key": pki.key("ca")}
    with pytest.raises(ConfigError) as info:  # a key that is not the certificate's
        load_config(environ={}, overrides={"sip": sip})
    assert "cannot load the certificate and key" in str(info.value)
    sip["tls_key"] = pki.key("server")
    with pytest.raises(ConfigError) as info:
        load_config(environ={}, overrides={"sip": {**sip, "tls_verify_client": True}})
    assert info.value.key == "sip.tls_ca"
    config = load_config(environ={"KEFU_RTP_SRTP": "required"}, overrides={"sip": sip})
    assert config.sip.tls_listen is not None and config.sip.tls_listen.port == 0
    assert config.rtp.srtp == "required"
    with pytest.raises(ConfigError) as info:
        load_config(environ={"KEFU_RTP_SRTP": "maybe"})
    assert info.value.key == "rtp.srtp"


def test_other_shops_default_to_the_bundled_list_and_can_be_set_or_emptied(tmp_path):
    from kefu.ai_bridge.dialog.shops import OTHER_SHOPS

    assert load_config(None, environ={}).ai.other_shops == OTHER_SHOPS
    path = tmp_path / "kefu.toml"
    path.write_text('[ai]\nother_shops = ["Acme Mart", "京东"]\n', encoding="utf-8")
    assert load_config(path, environ={}).ai.other_shops == ("Acme Mart", "京东")
    path.write_text("[ai]\nother_shops = []\n", encoding="utf-8")
    assert load_config(path, environ={}).ai.other_shops == ()
