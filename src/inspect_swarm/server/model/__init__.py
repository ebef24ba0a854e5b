"""The vocabulary every floor of the server shares: its types, its errors, keys and lineages,
and the input rules every surface checks."""
