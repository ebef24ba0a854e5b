"""What the server records: the one write path of runs and sandboxes, its SQLite store, and
the API's JSON objects."""
