"""Tests of kcore.record: batch views, builders, codecs, control records."""
