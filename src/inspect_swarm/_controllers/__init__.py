"""The built-in controllers, written against the controller contract."""
