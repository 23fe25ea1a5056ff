"""The `quotaflow` command line: one module per command group, on top of streams/, projections/ and devtools/."""
