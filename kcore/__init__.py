"""kcore: a Kafka-compatible broker core with broker-native cluster mirroring (KIP-1279)."""

__version__ = "0.1.0"
