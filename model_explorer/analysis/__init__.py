"""Analysis around the search: operator hooks, diagnostics, cross-backend comparison."""
