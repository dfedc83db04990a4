"""The protocol rule catalogue (filled in the next commit)."""
