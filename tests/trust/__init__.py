"""Certificates and their keys (validator.certificate, validator.signing), revocation."""
