"""Tests of validator/service: the drift and provision services, collection."""
