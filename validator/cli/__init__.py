"""The command line: thin click commands over typed functions."""
