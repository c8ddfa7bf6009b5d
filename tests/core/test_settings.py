"""``CommonSettings`` refuses values that would only fail later, and blame something else, with the fix named."""

from __future__ import annotations

import pytest
import trustme
from pydantic import ValidationError

from es_rerank.settings import MAX_ALIAS_BYTES, CommonSettings, settings_problems


def problems(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> str:
    """The ``settings_problems`` text of ``CommonSettings`` with ``name=value`` in the environment."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        CommonSettings()
    return settings_problems(caught.value)


@pytest.mark.parametrize(
    "alias, rule",
    [
        ("ESRR", "upper-case"),
        ("Esrr-docs", "upper-case"),
        ("", "is empty"),
        *[(f"esrr{char}docs", "index names have none of") for char in '\\/*?"<>|,#: '],
        ("-esrr", "starts with"),
        ("_esrr", "starts with"),
        ("+esrr", "starts with"),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a" * (MAX_ALIAS_BYTES + 1), "bytes long"),
        ("é" * (MAX_ALIAS_BYTES // 2 + 1), "bytes long"),
    ],
)
def test_an_alias_elasticsearch_refuses_names_the_rule_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, alias: str, rule: str
) -> None:
    message = problems(monkeypatch, "ESRR_ES_ALIAS", alias)
    assert "ESRR_ES_ALIAS: " in message and rule in message and "such as esrr-docs" in message, message


@pytest.mark.parametrize("alias", ["esrr-docs", "esrr.docs_2", "a" * MAX_ALIAS_BYTES, "ésrr"])
def test_usable_aliases_pass(monkeypatch: pytest.MonkeyPatch, alias: str) -> None:
    monkeypatch.setenv("ESRR_ES_ALIAS", alias)
    assert CommonSettings().es_alias == alias


@pytest.mark.parametrize(
    "name", ["ESRR_ES_TIMEOUT_S", "ESRR_ES_BULK_INITIAL_BACKOFF_S", "ESRR_BM25_K1", "ESRR_BM25_TITLE_K1"]
)
@pytest.mark.parametrize("value", ["inf", "Infinity", "nan", "-inf"])
def test_float_settings_are_finite(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    message = problems(monkeypatch, name, value)
    assert f"{name}: " in message and "finite number" in message, message


@pytest.mark.parametrize("name, default", [("ESRR_HOME", "./artifacts"), ("ESRR_NFCORPUS", "../shared/data/nfcorpus")])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_directory_setting_is_an_error_not_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, name: str, default: str, value: str
) -> None:
    message = problems(monkeypatch, name, value)
    assert f"{name}: " in message and "is empty" in message and f"unset it for the default ({default})" in message


def test_unset_home_is_the_documented_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ESRR_HOME", raising=False)
    assert str(CommonSettings().home) == "artifacts"


def test_an_api_key_beside_a_password_in_the_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESRR_ES_URL", "https://elastic:s3cret@127.0.0.1:9200")
    message = problems(monkeypatch, "ESRR_ES_API_KEY", "a2V5")
    assert "ESRR_ES_API_KEY and a user:password in ESRR_ES_URL" in message and "drop one" in message, message
    assert "s3cret" not in message and "a2V5" not in message


def test_ca_certs_with_a_plain_http_url_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    ca = tmp_path / "http_ca.crt"
    trustme.CA().cert_pem.write_to_path(str(ca))
    message = problems(monkeypatch, "ESRR_ES_CA_CERTS", str(ca))  # ESRR_ES_URL defaults to http://
    assert "ESRR_ES_CA_CERTS is set but ESRR_ES_URL is not https://" in message, message


@pytest.mark.parametrize("where", ["missing.crt", "."])
def test_ca_certs_must_name_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path, where: str) -> None:
    monkeypatch.setenv("ESRR_ES_URL", "https://127.0.0.1:9200")
    message = problems(monkeypatch, "ESRR_ES_CA_CERTS", str(tmp_path / where))
    assert "ESRR_ES_CA_CERTS: " in message and "is not a file" in message and "http_ca.crt" in message, message


def test_the_api_key_is_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESRR_ES_API_KEY", "a2V5LXZhbHVl")
    settings = CommonSettings()
    assert settings.es_api_key.get_secret_value() == "a2V5LXZhbHVl" and "a2V5LXZhbHVl" not in repr(settings)


def test_a_blank_api_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    message = problems(monkeypatch, "ESRR_ES_API_KEY", " ")
    assert "ESRR_ES_API_KEY: " in message and "is empty" in message and "_security/api_key" in message, message


@pytest.mark.parametrize("content", ["", "not a certificate\n", "-----BEGIN CERTIFICATE-----\nAAAA\n"])
def test_ca_certs_must_hold_pem_certificates(monkeypatch: pytest.MonkeyPatch, tmp_path, content: str) -> None:
    monkeypatch.setenv("ESRR_ES_URL", "https://127.0.0.1:9200")
    (tmp_path / "http_ca.crt").write_text(content)
    message = problems(monkeypatch, "ESRR_ES_CA_CERTS", str(tmp_path / "http_ca.crt"))
    assert "ESRR_ES_CA_CERTS: " in message and "cannot be read as CA certificates" in message, message


def test_an_empty_ca_certs_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    message = problems(monkeypatch, "ESRR_ES_CA_CERTS", " ")
    assert "ESRR_ES_CA_CERTS: " in message and "is empty; unset it to trust the system's CAs" in message, message


@pytest.mark.parametrize("key", ["c2VjcmV0\nc2VjcmV0", "secret id:key", "id:key:more", "s3cr3t!"])
def test_a_malformed_api_key_is_refused_and_not_echoed(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    message = problems(monkeypatch, "ESRR_ES_API_KEY", key)
    assert "ESRR_ES_API_KEY: " in message and "is not an API key" in message, message
    assert all(part not in message for part in ("c2VjcmV0", "secret", "s3cr3t", "more"))


@pytest.mark.parametrize(
    "given, kept",
    [(" a2V5LXZhbHVl== ", "a2V5LXZhbHVl=="), ("ApiKey a2V5", "a2V5"), ("my-id : the_key", "my-id:the_key")],
)
def test_an_api_key_is_normalised(monkeypatch: pytest.MonkeyPatch, given: str, kept: str) -> None:
    monkeypatch.setenv("ESRR_ES_API_KEY", given)
    assert CommonSettings().es_api_key.get_secret_value() == kept


def test_the_served_model_is_the_window_variant_once_trained_and_callers_read_its_features(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    import json

    from es_rerank.lex import LEX3, LEX3_WINDOW
    from es_rerank.settings import BrokerSettings

    for name in ("ESRR_CHECKPOINT", "ESRR_LEX_FEATURES"):
        monkeypatch.delenv(name, raising=False)
    models = tmp_path / "models"
    models.mkdir()
    assert BrokerSettings(home=tmp_path).checkpoint_path == models / "delta-32-lex3.pt"  # nothing trained
    assert BrokerSettings(home=tmp_path).lex_features == LEX3
    (models / "delta-32-lex3.pt").write_bytes(b"")
    (models / "delta-32-lex3-window.pt").write_bytes(b"")
    served = BrokerSettings(home=tmp_path)
    assert served.checkpoint_path == models / "delta-32-lex3-window.pt" and served.lex_features == LEX3_WINDOW
    other = models / "mine.pt"
    other.with_suffix(".json").write_text(json.dumps({"lex_features": ["text_bm25", "title_jaccard_wz"]}))
    monkeypatch.setenv("ESRR_CHECKPOINT", str(other))
    assert BrokerSettings(home=tmp_path).lex_features == ("text_bm25", "title_jaccard_wz")  # from its record
    monkeypatch.setenv("ESRR_LEX_FEATURES", "abstract_bm25")
    assert BrokerSettings(home=tmp_path).lex_features == ("abstract_bm25",)  # said explicitly: kept
    monkeypatch.delenv("ESRR_LEX_FEATURES")
    other.with_suffix(".json").write_text(json.dumps({"lex_features": ["nonsense"]}))
    with pytest.raises(ValidationError, match="mine.json names Lex features the model cannot read"):
        BrokerSettings(home=tmp_path)
