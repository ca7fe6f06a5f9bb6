"""Request handlers, one module per API family; each module has ``register(registry)``."""
