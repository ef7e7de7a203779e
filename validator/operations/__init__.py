"""The operations: one typed function per command, between the CLI and the rooms below.

Each takes one request object, returns an outcome, records history and issues
certificates; the click commands only parse options, call one of these, render
and exit with :func:`validator.operations.outcome.exit_code`.
"""
