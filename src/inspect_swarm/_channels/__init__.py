"""The built-in channels, written against the channel contract."""
