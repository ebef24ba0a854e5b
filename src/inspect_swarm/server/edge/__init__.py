"""The HTTP edge: routes, keys and scopes, body and header limits, request schemas, errors
as statuses, the access log and the E2B surface. Everything that knows a status code."""
