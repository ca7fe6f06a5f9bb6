"""Authentication: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), JAAS configs, principals.

Pure (sans-IO): the mechanisms and the per-connection authenticator take bytes and time and
return bytes and decisions; :mod:`kcore.server.network` moves the bytes.
"""
