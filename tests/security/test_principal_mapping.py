"""ssl.principal.mapping.rules as Kafka's SslPrincipalMapper, and subjects in RFC 2253 form.

The expectations are Kafka's own (SslPrincipalMapperTest and the "Customizing SSL User Name"
examples of Kafka's security documentation), then properties over generated names.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcore.security.principal_mapping import NoMatchingRule, SslPrincipalMapper, rfc2253_name

KAFKA_TEST_RULES = ", ".join(
    [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_mapper_maps_kafkas_examples(name, expected):
    assert SslPrincipalMapper(KAFKA_TEST_RULES).name(name) == expected


def test_mapper_maps_the_examples_of_kafkas_documentation():
    rules = (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    mapper = SslPrincipalMapper(rules)
    unknown = "O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert mapper.name(f"CN=serviceuser,OU=ServiceUsers,{unknown}") == "serviceuser"
    assert mapper.name(f"CN=adminUser,OU=Admin,{unknown}") == "adminuser@admin"


def test_mapper_keeps_an_escaped_comma_of_a_subject():
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_mapper_accepts_kafkas_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_mapper_refuses_kafkas_invalid_rules(rules):
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "expected, rules",
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, "
            "/DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT",
        ),
    ],
)
def test_mapper_splits_rules_as_kafka(expected, rules):
    assert str(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_mapper_without_a_matching_rule_refuses_the_name():
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=admin$/admin/").name("CN=x")


def test_mapper_keeps_a_back_reference_past_the_last_group_literal():
    # Kafka's escapeLiteralBackReferences: $3 with two groups is the text "$3".
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1-$3-$2/")
    assert mapper.name("CN=a,OU=b") == "a-$3-b"


_VALUE = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789.-_", min_size=1)


@given(cn=_VALUE, ou=_VALUE, o=_VALUE)
def test_mapper_default_is_the_name_and_a_rule_extracts_its_groups(cn, ou, o):
    name = f"CN={cn},OU={ou},O={o}"
    assert SslPrincipalMapper("DEFAULT").name(name) == name
    assert SslPrincipalMapper(None).name(name) == name
    mapper = SslPrincipalMapper("RULE:^CN=([^,]*),OU=([^,]*),.*$/$2:$1/U,DEFAULT")
    assert mapper.name(name) == f"{ou}:{cn}".upper()
    lower = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1/L")
    assert lower.name(name) == cn.lower()


@given(cn=_VALUE, other=_VALUE)
def test_mapper_first_matching_rule_wins(cn, other):
    escaped = re.escape(other)
    mapper = SslPrincipalMapper(f"RULE:^CN={escaped}x,.*$/other/, RULE:^CN=(.*),O=.*$/$1/, DEFAULT")
    assert mapper.name(f"CN={cn},O=org") == (
        "other" if f"{cn},O=org".startswith(f"{other}x,") else cn
    )


def _subject(*rdns):
    return tuple(tuple(rdn) for rdn in rdns)


def test_rfc2253_name_is_most_specific_first_with_javas_keywords():
    subject = _subject(
        [("countryName", "US")],
        [("stateOrProvinceName", "CA")],
        [("localityName", "SF")],
        [("organizationName", "Acme, Inc.")],
        [("organizationalUnitName", "eng")],
        [("commonName", "alice")],
    )
    assert rfc2253_name(subject) == "CN=alice,OU=eng,O=Acme\\, Inc.,L=SF,ST=CA,C=US"


def test_rfc2253_name_writes_other_attributes_as_oid_and_der():
    subject = _subject([("commonName", "bob")], [("emailAddress", "b@x")])
    # Java: 1.2.840.113549.1.9.1=#16 (IA5String), length 3, "b@x".
    assert rfc2253_name(subject) == "1.2.840.113549.1.9.1=#1603624078,CN=bob"


def test_rfc2253_name_joins_a_multi_valued_rdn_and_escapes_edges():
    subject = _subject([("domainComponent", "com")], [("commonName", " x+y "), ("userId", "#1")])
    assert rfc2253_name(subject) == "CN=\\ x\\+y\\ +UID=\\#1,DC=com"
