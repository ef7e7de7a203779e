"""Tests of validator/store: the history, its migration, query plans and retention."""
