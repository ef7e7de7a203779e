"""Built-in scenario files (data: one JSON file per simulated node)."""
