"""A sample MCP server for `make dev` and the tests: a read-only tool, a destructive one, one that asks for input."""
