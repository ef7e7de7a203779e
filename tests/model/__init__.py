"""Tests of validator/model and its encodings: decoding, the fields, the packed codec."""
