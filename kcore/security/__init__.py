"""Security: TLS listeners (settings, contexts, the principal of a client certificate).

Sans-IO modules (:mod:`~kcore.security.principal_mapping`, :mod:`~kcore.security.tls_config`)
and the Trio shell of a TLS connection (:mod:`~kcore.security.tls_transport`).
"""
