"""Rendering acceptance reports: terminal, JSON, HTML, JUnit."""
