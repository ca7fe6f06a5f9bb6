"""Security: authentication and the principals it yields.

* SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), JAAS configs, the per-connection authenticator:
  pure (sans-IO), they take bytes and time and return bytes and decisions;
  :mod:`kcore.server.network` moves the bytes.
* TLS listeners: their settings (:mod:`~kcore.security.tls_config`), the principal of a client
  certificate (:mod:`~kcore.security.principal_mapping`), both pure, and the Trio shell of a
  TLS connection (:mod:`~kcore.security.tls_transport`).
"""
