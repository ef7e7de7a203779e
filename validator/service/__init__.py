"""The service layer: one typed function per command, between the CLI and the rooms below.

Each takes one request object, returns an outcome, records history and issues
certificates; the click commands only parse options, call one of these, render
and exit with :func:`validator.service.outcome.exit_code`. Here too is what certify
and drift run to collect and judge (:mod:`validator.service.collect_and_judge`).
"""
