"""Tests of validator/report: HTML, JSON, JUnit, SVG, terminal, RMA and the writer."""
