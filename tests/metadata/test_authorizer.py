"""StandardAuthorizer: Kafka's ACL rules over the metadata image (kcore/metadata/authorizer.py).

Each rule has its own test; hypothesis properties check the rules against a direct restatement
of them over random ACL sets (deny precedence, wildcards, prefixes, implied operations).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcore.log.config import InvalidConfigError
from kcore.metadata.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    supported_operations,
)
from kcore.metadata.authorizer import (
    STANDARD_AUTHORIZER,
    StandardAuthorizer,
    build_authorizer,
    parse_super_users,
)
from kcore.metadata.delta import MetadataDelta
from kcore.metadata.image import AclsImage, MetadataImage, StandardAcl
from kcore.protocol import messages as m

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


def acl(
    name="orders",
    *,
    rtype=Res.TOPIC,
    pattern=Pat.LITERAL,
    principal=ALICE,
    host="*",
    op=Op.READ,
    perm=Perm.ALLOW,
) -> StandardAcl:
    return StandardAcl(int(rtype), name, int(pattern), principal, host, int(op), int(perm))


class Holder:
    """Stands in for the broker's image: the authorizer reads ``holder.image``."""

    def __init__(self, acls=()):
        self.image = AclsImage({uuid.uuid4(): a for a in acls})

    def set(self, acls) -> None:
        self.image = AclsImage({uuid.uuid4(): a for a in acls})


def authorizer(acls=(), **kwargs) -> StandardAuthorizer:
    holder = Holder(acls)
    return StandardAuthorizer(lambda: holder.image, **kwargs)


def allowed(auth, op=Op.READ, name="orders", *, principal=ALICE, host=HOST, rtype=Res.TOPIC):
    return auth.authorize(principal, host, op, rtype, name)


# -- the rules, one by one -----------------------------------------------------------------------


def test_authorizer_literal_allow_grants_only_that_resource_and_operation():
    auth = authorizer([acl("orders")])
    assert allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.WRITE, "orders")
    assert not allowed(auth, Op.READ, "orders2")
    assert not allowed(auth, Op.READ, "orders", rtype=Res.GROUP)


def test_authorizer_no_acl_on_resource_denies_by_default():
    assert not allowed(authorizer())
    assert not allowed(authorizer([acl("payments")]), name="orders")


def test_authorizer_allow_everyone_if_no_acl_found_allows_only_resources_without_acls():
    auth = authorizer([acl("orders", principal=BOB)], allow_everyone_if_no_acl_found=True)
    assert allowed(auth, name="payments")  # no ACL at all on it
    # an ACL for someone else on the resource means "ACLs found": alice is refused (KAFKA-14435)
    assert not allowed(auth, name="orders")
    assert allowed(auth, name="orders", principal=BOB)


def test_authorizer_allow_everyone_does_not_apply_when_a_wildcard_or_prefix_matches():
    auth = authorizer(
        [acl("*", principal=BOB), acl("pay", pattern=Pat.PREFIXED, principal=BOB, rtype=Res.GROUP)],
        allow_everyone_if_no_acl_found=True,
    )
    assert not allowed(auth, name="anything")
    assert not allowed(auth, name="payments", rtype=Res.GROUP)
    assert allowed(auth, name="other", rtype=Res.GROUP)


def test_authorizer_deny_wins_over_allow():
    auth = authorizer([acl(op=Op.ALL), acl(op=Op.WRITE, perm=Perm.DENY)])
    assert allowed(auth, Op.READ)
    assert not allowed(auth, Op.WRITE)


def test_authorizer_deny_all_refuses_every_operation_even_with_allow_all():
    auth = authorizer([acl(op=Op.ALL), acl(op=Op.ALL, perm=Perm.DENY)])
    for op in supported_operations(Res.TOPIC):
        assert not allowed(auth, op)


def test_authorizer_wildcard_deny_overrides_literal_allow():
    auth = authorizer([acl("orders"), acl("*", perm=Perm.DENY)])
    assert not allowed(auth)


def test_authorizer_prefixed_deny_overrides_literal_allow():
    auth = authorizer([acl("orders"), acl("ord", pattern=Pat.PREFIXED, perm=Perm.DENY)])
    assert not allowed(auth, name="orders")


def test_authorizer_prefixed_acl_matches_names_starting_with_the_prefix():
    auth = authorizer([acl("pay", pattern=Pat.PREFIXED)])
    assert allowed(auth, name="pay")
    assert allowed(auth, name="payments")
    assert not allowed(auth, name="pa")
    assert not allowed(auth, name="repay")


def test_authorizer_prefixed_pattern_is_not_a_glob():
    auth = authorizer([acl("pay*", pattern=Pat.PREFIXED), acl("rec*")])
    assert not allowed(auth, name="payments")
    assert allowed(auth, name="pay*ments")
    assert not allowed(auth, name="records")  # a literal "rec*" is just that name
    assert allowed(auth, name="rec*")


def test_authorizer_prefix_lookup_with_many_prefixes_and_short_names():
    prefixes = [acl(f"p{i}", pattern=Pat.PREFIXED) for i in range(50)]
    auth = authorizer(prefixes)
    assert allowed(auth, name="p7")
    assert allowed(auth, name="p49x")
    assert not allowed(auth, name="q1")


def test_authorizer_wildcard_resource_matches_every_name_of_its_type():
    auth = authorizer([acl("*")])
    assert allowed(auth, name="orders")
    assert allowed(auth, name="*")
    assert not allowed(auth, name="orders", rtype=Res.GROUP)


def test_authorizer_wildcard_principal_user_star_matches_every_user():
    auth = authorizer([acl(principal="User:*")])
    assert allowed(auth, principal=ALICE)
    assert allowed(auth, principal=BOB)


def test_authorizer_principal_must_match_exactly():
    auth = authorizer([acl(principal=ALICE), acl(principal="Group:*")])
    assert not allowed(auth, principal=BOB)
    assert not allowed(auth, principal="User:Alice")


def test_authorizer_host_star_or_exact_address():
    auth = authorizer([acl(host=HOST, op=Op.READ), acl(host="*", op=Op.WRITE)])
    assert allowed(auth, Op.READ, host=HOST)
    assert not allowed(auth, Op.READ, host=OTHER_HOST)
    assert allowed(auth, Op.WRITE, host=OTHER_HOST)


def test_authorizer_deny_from_one_host_only():
    auth = authorizer([acl(op=Op.ALL), acl(host=OTHER_HOST, op=Op.READ, perm=Perm.DENY)])
    assert allowed(auth, host=HOST)
    assert not allowed(auth, host=OTHER_HOST)


def test_authorizer_allow_all_grants_every_operation():
    auth = authorizer([acl(op=Op.ALL)])
    for op in supported_operations(Res.TOPIC):
        assert allowed(auth, op)


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_authorizer_allow_implies_describe(op):
    assert allowed(authorizer([acl(op=op)]), Op.DESCRIBE)


@pytest.mark.parametrize("op", [Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
def test_authorizer_other_operations_do_not_imply_describe(op):
    assert not allowed(authorizer([acl(op=op)]), Op.DESCRIBE)


def test_authorizer_alter_configs_implies_describe_configs_only():
    auth = authorizer([acl(op=Op.ALTER_CONFIGS)])
    assert allowed(auth, Op.DESCRIBE_CONFIGS)
    assert not allowed(auth, Op.ALTER)
    assert not allowed(authorizer([acl(op=Op.ALTER)]), Op.DESCRIBE_CONFIGS)


def test_authorizer_implication_does_not_run_backwards():
    auth = authorizer([acl(op=Op.DESCRIBE), acl(op=Op.DESCRIBE_CONFIGS)])
    assert not allowed(auth, Op.READ)
    assert not allowed(auth, Op.ALTER_CONFIGS)


def test_authorizer_deny_of_an_implying_operation_does_not_deny_describe():
    auth = authorizer([acl(op=Op.DESCRIBE), acl(op=Op.READ, perm=Perm.DENY)])
    assert allowed(auth, Op.DESCRIBE)
    assert not allowed(auth, Op.READ)


def test_authorizer_deny_describe_refuses_describe_despite_allow_read():
    auth = authorizer([acl(op=Op.READ), acl(op=Op.DESCRIBE, perm=Perm.DENY)])
    assert not allowed(auth, Op.DESCRIBE)
    assert allowed(auth, Op.READ)


def test_authorizer_super_user_is_allowed_everything_despite_deny():
    auth = authorizer([acl(op=Op.ALL, perm=Perm.DENY, principal="User:*")], super_users={ALICE})
    assert allowed(auth, Op.WRITE, principal=ALICE)
    assert allowed(auth, Op.ALTER, CLUSTER_RESOURCE_NAME, principal=ALICE, rtype=Res.CLUSTER)
    assert not allowed(auth, Op.WRITE, principal=BOB)


def test_authorizer_cluster_resource():
    auth = authorizer([acl(CLUSTER_RESOURCE_NAME, rtype=Res.CLUSTER, op=Op.ALTER)])
    assert allowed(auth, Op.ALTER, CLUSTER_RESOURCE_NAME, rtype=Res.CLUSTER)
    assert allowed(auth, Op.DESCRIBE, CLUSTER_RESOURCE_NAME, rtype=Res.CLUSTER)
    assert not allowed(auth, Op.CLUSTER_ACTION, CLUSTER_RESOURCE_NAME, rtype=Res.CLUSTER)


def test_authorizer_sees_new_acls_as_soon_as_the_image_has_them():
    holder = Holder()
    auth = StandardAuthorizer(lambda: holder.image)
    assert not allowed(auth)
    holder.set([acl()])
    assert allowed(auth)
    holder.set([])
    assert not allowed(auth)


def test_authorizer_over_a_replayed_metadata_image():
    image = MetadataImage.empty()
    acl_id = uuid.uuid4()
    delta = MetadataDelta(image)
    delta.replay(
        m.AccessControlEntryRecord(
            id=acl_id,
            resource_type=int(Res.TOPIC),
            resource_name="orders",
            pattern_type=int(Pat.LITERAL),
            principal=ALICE,
            host="*",
            operation=int(Op.WRITE),
            permission_type=int(Perm.ALLOW),
        )
    )
    holder = {"image": delta.apply()}
    auth = StandardAuthorizer(lambda: holder["image"].acls)
    assert allowed(auth, Op.WRITE)
    delta = MetadataDelta(holder["image"])
    delta.replay(m.RemoveAccessControlEntryRecord(id=acl_id))
    holder["image"] = delta.apply()
    assert not allowed(auth, Op.WRITE)


def test_authorizer_authorize_many_and_authorized_names_keep_order():
    auth = authorizer([acl("b"), acl("a", pattern=Pat.PREFIXED)])
    names = ["c", "b", "abc", "a"]
    assert auth.authorize_many(ALICE, HOST, Op.READ, Res.TOPIC, names) == [
        False,
        True,
        True,
        True,
    ]
    assert auth.authorized_names(ALICE, HOST, Op.READ, Res.TOPIC, names) == ["b", "abc", "a"]


def test_authorizer_authorized_operations_bitfield():
    auth = authorizer([acl(op=Op.READ), acl(op=Op.ALTER_CONFIGS)])
    bits = auth.authorized_operations(ALICE, HOST, Res.TOPIC, "orders")
    expected = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert bits == sum(1 << int(op) for op in expected)
    assert authorizer(super_users={ALICE}).authorized_operations(
        ALICE, HOST, Res.GROUP, "g"
    ) == sum(1 << int(op) for op in supported_operations(Res.GROUP))


def test_authorizer_acls_lists_what_the_filter_matches():
    acls = [acl("orders"), acl("ord", pattern=Pat.PREFIXED), acl("*"), acl("g", rtype=Res.GROUP)]
    auth = authorizer(acls)
    everything = AclBindingFilter(Res.ANY, None, Pat.ANY, None, None, Op.ANY, Perm.ANY)
    assert sorted(auth.acls(everything), key=repr) == sorted(acls, key=repr)
    match = AclBindingFilter(Res.TOPIC, "orders", Pat.MATCH, None, None, Op.ANY, Perm.ANY)
    assert set(auth.acls(match)) == set(acls[:3])


# -- authorize_by_resource_type ------------------------------------------------------------------


def by_type(auth, op=Op.WRITE, rtype=Res.TRANSACTIONAL_ID, principal=ALICE):
    return auth.authorize_by_resource_type(principal, HOST, op, rtype)


def test_authorize_by_resource_type_needs_some_allow():
    assert not by_type(authorizer())
    assert by_type(authorizer([acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE)]))
    assert by_type(authorizer([acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.ALL)]))
    assert not by_type(authorizer([acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.DESCRIBE)]))
    assert not by_type(authorizer([acl("tx", rtype=Res.TOPIC, op=Op.WRITE)]))


def test_authorize_by_resource_type_super_user_and_allow_everyone():
    deny_all = [acl("*", rtype=Res.TRANSACTIONAL_ID, op=Op.ALL, perm=Perm.DENY)]
    assert by_type(authorizer(deny_all, super_users={ALICE}))
    assert by_type(authorizer(allow_everyone_if_no_acl_found=True))


def test_authorize_by_resource_type_literal_deny_cancels_same_literal_allow():
    same = [
        acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE),
        acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE, perm=Perm.DENY),
    ]
    assert not by_type(authorizer(same))
    other = [*same, acl("tx2", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE)]
    assert by_type(authorizer(other))


def test_authorize_by_resource_type_prefixed_deny_dominates_longer_allows():
    acls = [
        acl("app-tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE),
        acl("app-", rtype=Res.TRANSACTIONAL_ID, pattern=Pat.PREFIXED, op=Op.WRITE),
        acl("app", rtype=Res.TRANSACTIONAL_ID, pattern=Pat.PREFIXED, op=Op.WRITE, perm=Perm.DENY),
    ]
    assert not by_type(authorizer(acls))
    assert by_type(authorizer([*acls, acl("other", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE)]))


def test_authorize_by_resource_type_wildcard_deny_refuses_and_wildcard_allow_grants():
    wild_allow = acl("*", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE)
    wild_deny = acl("*", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE, perm=Perm.DENY)
    named_deny = acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE, perm=Perm.DENY)
    assert by_type(authorizer([wild_allow, named_deny]))
    assert not by_type(authorizer([wild_allow, wild_deny]))
    assert not by_type(authorizer([wild_deny, wild_allow]))


def test_authorize_by_resource_type_ignores_other_principals_and_hosts():
    acls = [
        acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE, principal=BOB),
        acl("tx", rtype=Res.TRANSACTIONAL_ID, op=Op.WRITE, host=OTHER_HOST),
    ]
    auth = authorizer(acls)
    assert not by_type(auth)
    assert auth.authorize_any(BOB, HOST, Op.WRITE, Res.TRANSACTIONAL_ID)


# -- configuration -------------------------------------------------------------------------------


def test_parse_super_users_splits_on_semicolons_and_trims():
    assert parse_super_users(" User:a ;User:b;; ") == {"User:a", "User:b"}
    assert parse_super_users("") == frozenset()
    with pytest.raises(InvalidConfigError, match="principalType:principalName"):
        parse_super_users("User:a;bob")


def test_build_authorizer_by_class_name():
    acls = AclsImage
    assert build_authorizer("", acls) is None
    assert isinstance(build_authorizer(STANDARD_AUTHORIZER, acls), StandardAuthorizer)
    assert isinstance(build_authorizer("kcore.StandardAuthorizer", acls), StandardAuthorizer)
    with pytest.raises(InvalidConfigError, match="authorizer.class.name"):
        build_authorizer("kafka.security.authorizer.AclAuthorizer", acls)


# -- properties: the rules restated over random ACL sets -------------------------------------------

_NAMES = ["a", "ab", "abc", "b", "*"]
_PRINCIPALS = [ALICE, BOB, "User:*"]
_HOSTS = [HOST, OTHER_HOST, "*"]
_OPS = [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]

acls_strategy = st.lists(
    st.builds(
        acl,
        st.sampled_from(_NAMES),
        rtype=st.sampled_from([Res.TOPIC, Res.GROUP]),
        pattern=st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
        principal=st.sampled_from(_PRINCIPALS),
        host=st.sampled_from(_HOSTS),
        op=st.sampled_from(_OPS),
        perm=st.sampled_from([Perm.ALLOW, Perm.DENY]),
    ),
    max_size=8,
)
requests = st.tuples(
    st.sampled_from([ALICE, BOB, "User:carol"]),
    st.sampled_from([HOST, OTHER_HOST]),
    st.sampled_from([o for o in _OPS if o != Op.ALL]),
    st.sampled_from([Res.TOPIC, Res.GROUP]),
    st.sampled_from(["a", "ab", "abc", "abd", "b", "c"]),
)


def _model(acls, principal, host, op, rtype, name, *, super_users=(), allow_everyone=False):
    """The rules as the Kafka documentation states them, without an index."""
    if principal in super_users:
        return True
    on_resource = [
        a
        for a in acls
        if a.resource_type == rtype
        and (
            (a.pattern_type == Pat.LITERAL and a.resource_name in (name, "*"))
            or (a.pattern_type == Pat.PREFIXED and name.startswith(a.resource_name))
        )
    ]
    if not on_resource:
        return allow_everyone
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}  # fmt: skip

    def applies(a, perm):
        if a.permission_type != perm or a.principal not in (principal, "User:*"):
            return False
        if a.host not in (host, "*"):
            return False
        if a.operation in (Op.ALL, op):
            return True
        return perm == Perm.ALLOW and a.operation in implied.get(op, ())

    if any(applies(a, Perm.DENY) for a in on_resource):
        return False
    return any(applies(a, Perm.ALLOW) for a in on_resource)


@settings(max_examples=400, deadline=None)
@given(acls_strategy, requests, st.booleans(), st.booleans())
def test_authorizer_agrees_with_the_rules_as_stated(acls, request, allow_everyone, super_alice):
    supers = {ALICE} if super_alice else set()
    auth = authorizer(acls, super_users=supers, allow_everyone_if_no_acl_found=allow_everyone)
    expected = _model(acls, *request, super_users=supers, allow_everyone=allow_everyone)
    assert auth.authorize(*request) == expected


@settings(max_examples=200, deadline=None)
@given(acls_strategy, requests)
def test_authorizer_adding_an_applying_deny_always_refuses(acls, request):
    principal, host, op, rtype, name = request
    deny = acl(name, rtype=rtype, principal=principal, host=host, op=op, perm=Perm.DENY)
    assert not authorizer([*acls, deny]).authorize(*request)
    wider = acl("*", rtype=rtype, principal="User:*", op=Op.ALL, perm=Perm.DENY)
    assert not authorizer([*acls, wider], allow_everyone_if_no_acl_found=True).authorize(*request)


@settings(max_examples=200, deadline=None)
@given(acls_strategy, requests)
def test_authorizer_adding_an_allow_never_refuses_without_deny(acls, request):
    principal, host, op, rtype, name = request
    allow = acl(name, rtype=rtype, principal=principal, host=host, op=op)
    if not any(a.permission_type == Perm.DENY for a in acls):
        assert authorizer([*acls, allow]).authorize(*request)
