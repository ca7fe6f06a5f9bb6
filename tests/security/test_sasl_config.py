"""The SASL keys of server.properties: per-listener settings and refusals at startup."""

import pytest

from kcore.log.config import InvalidConfigError
from kcore.server.config import BROKER_CONFIGS, BrokerConfig

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a-pw";'


def _props(**extra):
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9094,PLAINTEXT://127.0.0.1:9092,"
        "CONTROLLER://127.0.0.1:9093",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    props.update(extra)
    return props


def test_sasl_listener_settings_are_read_per_listener():
    config = BrokerConfig(
        _props(
            **{
                "connections.max.reauth.ms": "60000",
                "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "5000",
                "connection.failed.authentication.delay.ms": "250",
            }
        )
    )
    sasl = config.sasl_listeners["SASL_PLAINTEXT"]
    assert sasl.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert dict(sasl.plain_users) == {"alice": "a-pw"}
    assert dict(sasl.reauth_ms) == {"PLAIN": 60000, "SCRAM-SHA-256": 5000}
    assert sasl.failed_delay_ms == 250
    assert set(config.sasl_listeners) == {"SASL_PLAINTEXT"}
    assert "a-pw" not in repr(sasl)


def test_listener_prefixed_mechanisms_win_over_the_broker_wide_key():
    config = BrokerConfig(
        _props(**{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    )
    assert config.sasl_listeners["SASL_PLAINTEXT"].mechanisms == ("SCRAM-SHA-512",)


def test_sasl_keys_have_kafkas_defaults():
    assert BROKER_CONFIGS["sasl.enabled.mechanisms"].default == ("GSSAPI",)
    assert BROKER_CONFIGS["connections.max.reauth.ms"].default == 0
    assert BROKER_CONFIGS["connection.failed.authentication.delay.ms"].default == 100
    assert BrokerConfig().sasl_listeners == {}


@pytest.mark.parametrize(
    "extra, key, message",
    [
        (  # Kafka's default mechanism: kcore has no Kerberos
            {"sasl.enabled.mechanisms": "GSSAPI"},
            "sasl.enabled.mechanisms",
            "enables SASL mechanism GSSAPI (sasl.enabled.mechanisms), which kcore does not "
            "support: it serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
        ),
        (
            {"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,DIGEST-MD5"},
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            "enables SASL mechanism DIGEST-MD5",
        ),
        (  # OAUTHBEARER against an identity provider: not built
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.jwks.endpoint.url": "https://idp.example/jwks",
            },
            "sasl.oauthbearer.jwks.endpoint.url",
            "sasl.oauthbearer.jwks.endpoint.url is not supported: kcore validates only Kafka's "
            "unsecured OAUTHBEARER tokens",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.expected.issuer": "x",
            },
            "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.expected.issuer",
            "is not supported",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            },
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class",
            "kcore loads no callback handlers",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredValidatorAllowableClockSkewMs="-5";',
            },
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
            "must not be negative",
        ),
        (
            {
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;",
            },
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
            "OAUTHBEARER needs org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
        ),
        (
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": None},
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "enables PLAIN but listener.name.sasl_plaintext.plain.sasl.jaas.config is not set",
        ),
        (
            {"listener.name.sasl_plaintext.plain.sasl.jaas.config": "x.Y required user_a=;"},
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "Value not specified for key 'user_a' in JAAS config",
        ),
        (
            {
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "PLAIN needs org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
        (
            {"listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class": "x.Y"},
            "listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class",
            "is not supported: kcore loads no callback handlers",
        ),
        (  # SASL between brokers: Kafka's default mechanism there is GSSAPI
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
                "inter.broker.listener.name": "SASL_PLAINTEXT",
            },
            "sasl.mechanism.inter.broker.protocol",
            "sasl.mechanism.inter.broker.protocol=GSSAPI (Kafka's default) is not supported "
            "by kcore: the inter-broker listener SASL_PLAINTEXT is SASL_PLAINTEXT",
        ),
        (
            {
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
            },
            "sasl.mechanism.controller.protocol",
            "sasl.mechanism.controller.protocol=GSSAPI (Kafka's default) is not supported by "
            "kcore: the controller listener CONTROLLER is SASL_PLAINTEXT",
        ),
        (  # the node's own login on its controller listener: username and password
            {
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "sasl.mechanism.controller.protocol": "PLAIN",
                "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'user_a="a-pw";'
                ),
            },
            "listener.name.controller.plain.sasl.jaas.config",
            "has no username and no password: the controller login of this node",
        ),
    ],
)
def test_sasl_settings_kcore_cannot_honour_refuse_startup(extra, key, message):
    props = _props(**{k: v for k, v in extra.items() if v is not None})
    for k, v in extra.items():
        if v is None:
            del props[k]
    with pytest.raises(InvalidConfigError) as err:
        BrokerConfig(props)
    assert err.value.key == key
    assert message in err.value.message
    assert "a-pw" not in err.value.message


def test_kcore_format_refuses_kafkas_default_gssapi_with_one_line(tmp_path):
    from tests.tools.tool import kcore

    data = tmp_path / "data"
    overrides = {**_props(), "log.dirs": str(data)}
    del overrides["sasl.enabled.mechanisms"]  # Kafka's default, GSSAPI
    argv = [arg for k, v in overrides.items() for arg in ("--override", f"{k}={v}")]
    result = kcore("format", *argv)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if not line.startswith("[")]
    assert errors == [
        "kcore format: INVALID_CONFIG (40): Listener SASL_PLAINTEXT enables SASL mechanism "
        "GSSAPI (sasl.enabled.mechanisms), which kcore does not support: it serves PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"
    ]
    assert not data.exists()


def test_sasl_oauthbearer_listener_reads_the_unsecured_validator_options():
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredValidatorPrincipalClaimName="client_id" unsecuredValidatorRequiredScope="a b" '
        'unsecuredValidatorAllowableClockSkewMs="250";'
    )
    handler = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"
    config = BrokerConfig(
        _props(
            **{
                "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": jaas,
                handler: "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                "OAuthBearerUnsecuredValidatorCallbackHandler",  # Kafka's default: fine
            }
        )
    )
    options = config.sasl_listeners["SASL_PLAINTEXT"].oauthbearer
    assert (options.principal_claim, options.scope_claim) == ("client_id", "scope")
    assert (options.required_scope, options.allowable_clock_skew_ms) == (("a", "b"), 250)
    without = BrokerConfig(_props(**{"sasl.enabled.mechanisms": "OAUTHBEARER"}))
    assert without.sasl_listeners["SASL_PLAINTEXT"].oauthbearer.principal_claim == "sub"
