"""The project-wide rules: rooms, import circles, size guards, start-up, packaging, bench."""
