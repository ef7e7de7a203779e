"""Judging: facts plus policy give findings and a verdict. Pure: no I/O."""
