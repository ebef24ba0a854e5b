"""The bus: every channel's records, waits and notices in one run."""
